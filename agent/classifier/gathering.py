"""What each part of the baselines learns from, gathered sample by sample as the samples arrive.

A part learns once per window length from the window of that moment (``baselines.learn``); done
from the window, that means turning 60 samples into per-device columns at once, most of a learning
evaluation's cost on a large node. Since consecutive learnings of a part tile time, the samples a
part learns from are exactly those that arrived since it last learned: each sample's values are
appended to the part's columns as it arrives (a few C-level appends), and learning only sorts them.

Where the window is not exactly those samples (the first learning, a window cut short by a
checkpoint or a new job, a device appearing), the part learns from the window as before: the
result is the same either way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from operator import truediv
from typing import Any

from agent.classifier.baselines import PARTS, PEAK_FAMILIES, gather, lowest
from agent.classifier.samples import Sample


def _consume(it: Iterable[Any]) -> None:
    deque(it, maxlen=0)


class _Part:
    """One part's data since it last learned."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.family = PEAK_FAMILIES.get(part)
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
        series = getattr(s, self.family) if self.family else s.nfs_rtt_time
        if self.keys is None:
            self.keys = series.keys
            self.columns = [[] for _ in series.keys]
        elif series.keys is not self.keys:
            self.broken = True
            return
        if self.family:
            _consume(map(list.append, self.columns, series.values))
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


class Gathering:
    def __init__(self) -> None:
        self.parts = {p: _Part(p) for p in PARTS}

    def add(self, s: Sample) -> None:
        for p in self.parts.values():
            p.add(s)

    def take(self, window: Sequence[Sample], parts: Iterable[str]) -> dict[str, Any]:
        """What each of ``parts`` learns from ``window``; they start gathering afresh."""
        out = {}
        for name in parts:
            p = self.parts[name]
            if window:
                out[name] = p.data(window)
            p.reset()
        return out
