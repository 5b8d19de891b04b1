"""A token bucket: at most ``capacity`` tokens, refilled at ``rate`` a second, starting full. The
one rate limit under the chat channels' service limits (``alerts/ratelimit.py``), the metrics
port's requests (exporter-toolkit's ``rate_limit``) and its TLS handshakes (``exporter/handshake.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

_DUST = 1e-9  # float rounding: a token that is 0.9999999999 there is there


class TokenBucket:
    __slots__ = ("_at", "_clock", "_tokens", "capacity", "rate")

    def __init__(self, capacity: float, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self.rate = rate  # tokens per second
        self._clock = clock
        self._tokens = float(capacity)
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def available(self) -> int:
        """Whole tokens there now."""
        self._refill()
        return int(self._tokens + _DUST)

    def wait_time(self) -> float:
        """Seconds until one token is there (0 when one is there now)."""
        self._refill()
        missing = 1.0 - self._tokens
        return 0.0 if missing <= _DUST else missing / self.rate

    def take(self) -> None:
        """Spend a token whether or not one is there (a caller that checked ``available`` first)."""
        self._refill()
        self._tokens -= 1.0

    def try_take(self) -> bool:
        """Spend a token if one is there."""
        self._refill()
        if self._tokens + _DUST < 1.0:
            return False
        self._tokens -= 1.0
        return True
