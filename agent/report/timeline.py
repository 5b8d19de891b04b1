"""What the report page's timeline needs beyond the ledger's slots, kept bounded (pure: the clock
comes in with every call, a test replays a week in a second).

A *point* is one tick (or, once old, several merged): the verdict, each GPU's real work (SM
activity), utilization, memory and clocks events, and the node's disk, NFS, NIC and RDMA throughput.
A *mark* is one moment worth drawing: a verdict change, a checkpoint, a reclaim notice, a GPU fault.

The bound: the newest ``FINE`` points at the tick's own resolution, older ones merged into
``COARSE_SECONDS`` points, ``COARSE`` of them (8.5 days at 5 minutes), and ``MARKS`` marks, newest
kept. At most 1,800 + 2,448 points: about 60 bytes plus 35 bytes a GPU each as JSON, so 1.6 MB for an
8-GPU node with every point filled (``bench/report_page.py`` prints the size it measures).
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

FINE = 1800
COARSE_SECONDS = 300.0
COARSE = 2448
MARKS = 1000
IO_KINDS = ("disk", "nfs", "nic", "rdma")  # the inputs and links beside the GPUs, bytes/s each
VERSION = 1


class MarkKind(StrEnum):
    """What a mark is; the page draws each with its own shape."""

    VERDICT = "verdict"
    CHECKPOINT = "checkpoint"
    RECLAIM = "reclaim"
    GPU_FAULT = "gpu-fault"


@dataclass(slots=True)
class GpuPoint:
    """One GPU over one point: means over its span, except the memory (its peak) and the clocks
    events (every reason seen, an NVML bit set)."""

    work: float | None  # SM activity (tensor activity where no SM activity), 0-1
    util: float | None  # the share of time a kernel ran, 0-1
    mem: int | None  # bytes in use, the peak
    mem_total: int | None
    clocks: int = 0

    def to_json(self) -> list[Any]:
        return [_r(self.work), _r(self.util), self.mem, self.mem_total, self.clocks]

    @classmethod
    def from_json(cls, v: Any) -> GpuPoint:
        if not isinstance(v, list) or len(v) != 5:
            raise ValueError("a GPU point is [work, util, mem, mem_total, clocks]")
        return cls(_opt(v[0]), _opt(v[1]), _opt_int(v[2]), _opt_int(v[3]), _int(v[4]))


@dataclass(slots=True)
class Point:
    t: float  # wall time at its end
    span: float  # seconds it covers
    verdict: str | None  # the verdict at its end ("data/cpu": a data verdict and its sub-reason)
    gpus: list[GpuPoint] = field(default_factory=list)  # by GPU index
    io: list[float | None] = field(default_factory=lambda: [None] * len(IO_KINDS))  # IO_KINDS order

    def to_json(self) -> list[Any]:
        return [
            round(self.t, 3),
            round(self.span, 3),
            self.verdict,
            [g.to_json() for g in self.gpus],
            [None if x is None else round(x, 1) for x in self.io],
        ]

    @classmethod
    def from_json(cls, v: Any) -> Point:
        if not isinstance(v, list) or len(v) != 5:
            raise ValueError("a point is [t, span, verdict, gpus, io]")
        if v[2] is not None and not isinstance(v[2], str):
            raise ValueError("a point's verdict is a string")
        if not isinstance(v[3], list) or not isinstance(v[4], list) or len(v[4]) != len(IO_KINDS):
            raise ValueError("a point's gpus and io are lists")
        span = _number(v[1])
        if span <= 0:
            raise ValueError("a point's span is positive")
        return cls(_number(v[0]), span, v[2], [GpuPoint.from_json(g) for g in v[3]], [_opt(x) for x in v[4]])


@dataclass(frozen=True, slots=True)
class Mark:
    t: float
    kind: str  # a MarkKind
    label: str  # short: what the page writes beside it
    detail: str = ""

    def to_json(self) -> list[Any]:
        return [round(self.t, 3), self.kind, self.label, self.detail]

    @classmethod
    def from_json(cls, v: Any) -> Mark:
        if not isinstance(v, list) or len(v) != 4 or not all(isinstance(x, str) for x in v[1:]):
            raise ValueError("a mark is [t, kind, label, detail]")
        return cls(_number(v[0]), v[1], v[2][:200], v[3][:500])


def merge(a: Point, b: Point) -> Point:
    """``a`` then ``b`` as one point: means weighted by span, the memory's peak, every clocks event."""
    wa, wb = a.span, b.span
    gpus = []
    for i in range(max(len(a.gpus), len(b.gpus))):
        ga = a.gpus[i] if i < len(a.gpus) else None
        gb = b.gpus[i] if i < len(b.gpus) else None
        if ga is None or gb is None:
            gpus.append(gb or ga or GpuPoint(None, None, None, None))
            continue
        gpus.append(
            GpuPoint(
                _mean(ga.work, wa, gb.work, wb),
                _mean(ga.util, wa, gb.util, wb),
                _max(ga.mem, gb.mem),
                _max(ga.mem_total, gb.mem_total),
                ga.clocks | gb.clocks,
            )
        )
    io = [_mean(x, wa, y, wb) for x, y in zip(a.io, b.io, strict=True)]
    # the verdict at the merged point's end; its changes are marks, which are never merged
    return Point(b.t, wa + wb, b.verdict if b.verdict is not None else a.verdict, gpus, io)


class Timeline:
    def __init__(self) -> None:
        self.fine: deque[Point] = deque()
        self.coarse: deque[Point] = deque()
        self.marks: deque[Mark] = deque(maxlen=MARKS)
        # JSON text of fine[:len(_fine_texts)] and coarse[:len(_coarse_texts)]: a point is never changed
        # once added (the newest coarse point is replaced by merging, so it is never kept here), and
        # the file is written without turning 1.6 MB of points into text each save (~170 ms here)
        self._fine_texts: deque[str] = deque()
        self._coarse_texts: deque[str] = deque()

    def add(self, p: Point) -> None:
        """A new tick; the oldest fine point goes into its 5-minute coarse point once ``FINE`` are held."""
        self.fine.append(p)
        while len(self.fine) > FINE:
            old = self.fine.popleft()
            if self._fine_texts:
                self._fine_texts.popleft()
            last = self.coarse[-1] if self.coarse else None
            if last is not None and _bin(last.t) == _bin(old.t) and old.t > last.t:
                self.coarse[-1] = merge(last, old)
                continue
            self.coarse.append(old)
            if len(self.coarse) > COARSE:
                self.coarse.popleft()
                if self._coarse_texts:
                    self._coarse_texts.popleft()

    def mark(self, m: Mark) -> None:
        self.marks.append(m)

    def points(self, t0: float = -math.inf, t1: float = math.inf) -> list[Point]:
        """Every point that ends within [t0, t1], oldest first."""
        return [p for p in (*self.coarse, *self.fine) if t0 <= p.t <= t1]

    def marks_between(self, t0: float = -math.inf, t1: float = math.inf) -> list[Mark]:
        return [m for m in self.marks if t0 <= m.t <= t1]

    # --- persistence -------------------------------------------------------------------------------

    def to_text(self) -> str:
        """``to_json`` as JSON text, only the points added since the last call turned into text."""
        fine, coarse = self._fine_texts, self._coarse_texts
        while len(fine) < len(self.fine):
            fine.append(_dumps(self.fine[len(fine)].to_json()))
        while len(coarse) < len(self.coarse) - 1:
            coarse.append(_dumps(self.coarse[len(coarse)].to_json()))
        last = [_dumps(self.coarse[-1].to_json())] if self.coarse else []
        marks = _dumps([m.to_json() for m in self.marks])
        return (
            f'{{"version":{VERSION},"coarse":[{",".join([*coarse, *last])}],'
            f'"fine":[{",".join(fine)}],"marks":{marks}}}'
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "coarse": [p.to_json() for p in self.coarse],
            "fine": [p.to_json() for p in self.fine],
            "marks": [m.to_json() for m in self.marks],
        }

    @classmethod
    def from_json(cls, d: Any) -> Timeline:
        """Strict: anything but what ``to_json`` writes raises ``ValueError``."""
        if not isinstance(d, dict) or d.get("version") != VERSION:
            raise ValueError(f"not a version-{VERSION} timeline")
        tl = cls()
        for key, into in (("coarse", tl.coarse), ("fine", tl.fine)):
            items = d.get(key)
            if not isinstance(items, list):
                raise ValueError(f"{key} is not a list")
            into.extend(Point.from_json(x) for x in items[-(COARSE if key == "coarse" else FINE) :])
        marks = d.get("marks")
        if not isinstance(marks, list):
            raise ValueError("marks is not a list")
        tl.marks.extend(Mark.from_json(x) for x in marks)
        tl.to_text()  # at start, not at the first save on the event loop
        return tl


def _dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"))


def _bin(t: float) -> float:
    return math.floor(t / COARSE_SECONDS)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"not a finite number: {v!r}")
    return float(v)


def _opt(v: Any) -> float | None:
    return None if v is None else _number(v)


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"not a count: {v!r}")
    return v


def _opt_int(v: Any) -> int | None:
    return None if v is None else _int(v)


def _mean(x: float | None, wx: float, y: float | None, wy: float) -> float | None:
    if x is None or y is None:
        return y if x is None else x
    return (x * wx + y * wy) / (wx + wy)


def _max(x: int | None, y: int | None) -> int | None:
    vals: Iterable[int] = [v for v in (x, y) if v is not None]
    return max(vals, default=None)
