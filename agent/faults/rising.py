"""A cumulative error count's rise over a trailing window, per GPU: the evidence of GPU health's
rising-rate conditions (corrected ECC errors, NVLink replays and recoveries).

The rise is divided by the whole window even before the agent has watched that long, so two reads
seconds apart never make a rate of thousands an hour out of one error: a short history gives a lower
bound. A count that goes back (a driver reload resets the volatile counters) starts the history
again from there, never a negative rate; a count that cannot be read (NotSupported, a lost GPU)
drops it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from agent.config.types import format_duration
from agent.sources.gpu.part import GpuStats

Count = Callable[[GpuStats], int | None]


class RisingCount:
    """``what`` (a count of each GPU) rising faster than ``per_hour`` over ``window`` seconds."""

    def __init__(self, count: Count, what: str, window: float, per_hour: float) -> None:
        self._count = count
        self.what = what
        self.window = window
        self.per_hour = per_hour
        self._seen: dict[int, deque[tuple[float, int]]] = {}  # GPU index -> (monotonic, count), oldest first

    def observe(self, g: GpuStats, now: float) -> None:
        value = self._count(g) if g.up else None
        if value is None:
            self._seen.pop(g.index, None)
            return
        seen = self._seen.setdefault(g.index, deque())
        if seen and value < seen[-1][1]:
            seen.clear()  # reset: the errors before it are in no delta
        if not seen or value != seen[-1][1]:
            # only the changes: the count at any time is that of the last change before it, so the
            # read kept at the window's start is the same one, and a quiet GPU keeps one entry
            seen.append((now, value))
        # keep one read at or before the window's start: the base the rise is counted from
        while len(seen) > 1 and seen[1][0] <= now - self.window:
            seen.popleft()

    def rise(self, index: int) -> int | None:
        """Errors counted in the window (since the oldest read where the history is shorter)."""
        seen = self._seen.get(index)
        return seen[-1][1] - seen[0][1] if seen else None

    def per_hour_now(self, index: int) -> float | None:
        rise = self.rise(index)
        return None if rise is None or self.window <= 0 else rise * 3600.0 / self.window

    def condition(self, g: GpuStats) -> str | None:
        """The evidence while the rate is above the threshold, else None (a GpuHealth condition)."""
        rate = self.per_hour_now(g.index)
        if rate is None or rate <= self.per_hour:
            return None
        return (
            f"{self.rise(g.index)} {self.what} in {format_duration(self.window)}"
            f" ({rate:.0f}/h, above {self.per_hour:g}/h)"
        )
