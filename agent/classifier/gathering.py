"""What the per-sample parts of the baselines learn from, gathered sample by sample as they arrive.

A part learns once per window length from the window of that moment (``baselines.learn``). The
idle powers (each GPU's lowest, a Python-level pass over every GPU of every sample) and the NFS READ
RTTs (one division per mount and sample) cost as much from the window at once as spread over the
ticks, and spread they keep a learning evaluation short. Since consecutive learnings of a part tile
time, the samples a part learns from are exactly those that arrived since it last learned: each
sample is folded in as it arrives, and learning takes the result. The peaks are not gathered: the
window's columns are one C-level transposition at learning time, cheaper than an append per device
every tick.

Where the window is not exactly those samples (the first learning, a window cut short by a
checkpoint or a new job, a device appearing), the part learns from the window as before: the
result is the same either way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from operator import truediv
from typing import Any

from agent.classifier.baselines import gather, lowest
from agent.classifier.samples import Sample


def _consume(it: Iterable[Any]) -> None:
    deque(it, maxlen=0)


class _Part:
    """One part's data since it last learned."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.reset()

    def reset(self) -> None:
        self.first: Sample | None = None
        self.last: Sample | None = None
        self.count = 0
        self.keys: tuple[str, ...] | None = None
        self.columns: list[list[float]] = []
        self.low: dict[str, float] = {}
        self.broken = False  # the devices changed meanwhile: learn from the window

    def add(self, s: Sample) -> None:
        if self.count == 0:
            self.first = s
        self.last = s
        self.count += 1
        if self.broken:
            return
        if self.part == "idle_power":
            lowest(s, self.low)
            return
        series = s.nfs_rtt_time
        if self.keys is None:
            self.keys = series.keys
            self.columns = [[] for _ in series.keys]
        elif series.keys is not self.keys:
            self.broken = True
            return
        ops = s.nfs_ops
        if ops.keys is not series.keys:
            self.broken = True
            return
        if ops.values and min(ops.values) > 0:  # READs on every mount (the usual case)
            _consume(map(list.append, self.columns, map(truediv, series.values, ops.values)))
            return
        for col, t, n in zip(self.columns, series.values, ops.values, strict=True):
            if n > 0:
                col.append(t / n)

    def data(self, window: Sequence[Sample]) -> Any:
        """What the part learns from this window: its own where it holds exactly the window."""
        exact = (
            not self.broken
            and self.count == len(window)
            and self.first is window[0]
            and self.last is window[-1]
        )
        if not exact:
            return gather(window, self.part)
        if self.part == "idle_power":
            return self.low
        assert self.keys is not None
        return dict(zip(self.keys, self.columns, strict=True))


GATHERED = ("idle_power", "nfs_rtt")


class Gathering:
    def __init__(self) -> None:
        self.idle, self.rtt = _Part("idle_power"), _Part("nfs_rtt")
        self.parts = {"idle_power": self.idle, "nfs_rtt": self.rtt}

    def add(self, s: Sample) -> None:
        self.idle.add(s)
        self.rtt.add(s)

    def take(self, window: Sequence[Sample], parts: Iterable[str]) -> dict[str, Any]:
        """What each gathered part of ``parts`` learns from ``window``; they start gathering
        afresh. The others learn from the window."""
        out = {}
        for name in parts:
            p = self.parts.get(name)
            if p is None:
                continue
            if window:
                out[name] = p.data(window)
            p.reset()
        return out
