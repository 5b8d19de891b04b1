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

from agent.core.tokens import TokenBucket


def service_bucket(count: int, period: float, clock: Callable[[], float] = time.monotonic) -> TokenBucket:
    """The bucket for a service limit of ``count`` per ``period`` seconds (sized as above)."""
    capacity = max(1, math.ceil(count / 4))
    refill = count - capacity if count > capacity else count
    return TokenBucket(capacity, refill / period, clock)


class Limiter:
    """All of a channel's limits at once (Feishu: 5 a second and 100 a minute)."""

    def __init__(
        self, rates: tuple[tuple[int, float], ...], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.buckets = [service_bucket(n, w, clock) for n, w in rates]

    def available(self) -> int:
        return min((b.available() for b in self.buckets), default=1_000_000)

    def wait_time(self) -> float:
        return max((b.wait_time() for b in self.buckets), default=0.0)

    def take(self) -> None:
        for b in self.buckets:
            b.take()
