"""Token buckets sized so that a channel never exceeds its service's limit.

A service limit "N per W" is met by a bucket of capacity ``b`` refilled at ``(N - b) / W``: over any
window of W seconds at most ``b + (N - b) = N`` messages go out, however the sends are timed. ``b``
is a quarter of N, so a burst of alerts goes out at once and the rest at a steady pace (or in a
digest). A limit of 1 per W (Slack's one a second) is a plain one-per-W pacer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, count: int, period: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.count = count
        self.period = period
        self.capacity = max(1, math.ceil(count / 4))
        refill = count - self.capacity if count > self.capacity else count
        self.rate = refill / period  # tokens per second
        self._clock = clock
        self._tokens = float(self.capacity)
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def available(self) -> int:
        self._refill()
        return int(self._tokens + 1e-9)

    def wait_time(self) -> float:
        """Seconds until one token is there (0 when one is there now)."""
        self._refill()
        missing = 1.0 - self._tokens
        return 0.0 if missing <= 1e-9 else missing / self.rate

    def take(self) -> None:
        self._refill()
        self._tokens -= 1.0


class Limiter:
    """All of a channel's limits at once (Feishu: 5 a second and 100 a minute)."""

    def __init__(
        self, rates: tuple[tuple[int, float], ...], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.buckets = [TokenBucket(n, w, clock) for n, w in rates]

    def available(self) -> int:
        return min((b.available() for b in self.buckets), default=1_000_000)

    def wait_time(self) -> float:
        return max((b.wait_time() for b in self.buckets), default=0.0)

    def take(self) -> None:
        for b in self.buckets:
            b.take()
