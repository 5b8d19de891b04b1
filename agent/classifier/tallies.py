"""The window's GPUs: each sample's GPUs split into working / spinning / starved shares once (a
tally), and the tallies of a window added up (pure).

Shares are counted in whole thousandths (``UNIT``), so the running counts stay exact integers as the
window slides and always equal a fresh ``combine``. The engine keeps one tally per sample, so a
sliding window splits each GPU sample once; adding up a window's tallies is then a handful of
C-level passes over 60 small records, every evaluation.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Hashable, Sequence
from itertools import chain
from operator import attrgetter, is_
from typing import Any, NamedTuple, TypeVar

from agent.classifier.baselines import Baselines
from agent.classifier.gpus import shares
from agent.classifier.samples import Sample
from agent.config.classifier import ClassifierSection

K = TypeVar("K")
UNIT = 1000  # a GPU sample's whole time, in the counts


class GpuTally(NamedTuple):
    """One sample's GPUs, their time split into working / spinning / starved (in UNITs)."""

    n: int = 0
    working: int = 0
    spinning: int = 0
    starved: int = 0
    utils: tuple[float, ...] = ()
    work_sum: float = 0.0
    spin_util_sum: float = 0.0  # utilization, weighted by each GPU's spinning share
    spin_work_sum: float = 0.0  # the work measure, weighted likewise
    seen: tuple[int, ...] = ()
    not_working: tuple[tuple[int, int], ...] = ()  # (gpu index, UNITs not working) where any
    spinning_at: tuple[tuple[int, int], ...] = ()  # (gpu index, UNITs spinning) where any
    throttled: tuple[tuple[int, int], ...] = ()  # (gpu index, clocks event reasons)
    sources: frozenset[str] = frozenset()
    wait: float = 0.0  # share of its GPUs' time waiting (spinning or starved)
    work: float = 0.0  # share of its GPUs' time working
    starve: float = 0.0  # share of its GPUs' time starved


def tally(s: Sample, baselines: Baselines, cfg: ClassifierSection) -> GpuTally:
    """Pure; the engine memoizes it per sample."""
    utils: list[float] = []
    seen: list[int] = []
    not_working: list[tuple[int, int]] = []
    spinning_at: list[tuple[int, int]] = []
    throttled: list[tuple[int, int]] = []
    sources: set[str] = set()
    working = spinning = starved = 0
    work_sum = spin_util_sum = spin_work_sum = 0.0
    for g in s.gpus:
        util = g.util
        if not g.up or util is None:
            continue
        sh = shares(g, util, baselines, cfg)
        sources.add(sh.source)
        utils.append(util)
        seen.append(g.nvml_index)
        work_sum += sh.work
        w = round(sh.working * UNIT)
        z = min(UNIT - w, round(sh.starved * UNIT))
        sp = UNIT - w - z
        working += w
        spinning += sp
        starved += z
        if w < UNIT:
            not_working.append((g.nvml_index, UNIT - w))
        if sp:
            spinning_at.append((g.nvml_index, sp))
            spin_util_sum += sp / UNIT * util
            spin_work_sum += sp / UNIT * sh.work
        if g.throttle:
            throttled.append((g.nvml_index, g.throttle))
    n = len(utils)
    whole = n * UNIT
    return GpuTally(
        n,
        working,
        spinning,
        starved,
        tuple(utils),
        work_sum,
        spin_util_sum,
        spin_work_sum,
        tuple(seen),
        tuple(not_working),
        tuple(spinning_at),
        tuple(throttled),
        frozenset(sources),
        (spinning + starved) / whole if n else 0.0,
        working / whole if n else 0.0,
        starved / whole if n else 0.0,
    )


class GpuWindow(NamedTuple):
    """A window's tallies added up; ``working``/``spinning``/``starved`` in GPU samples' worth."""

    gpu_samples: int
    working: float
    spinning: float
    starved: float
    work_sum: float
    spin_util_sum: float
    spin_work_sum: float
    util_mean: float | None
    util_p5: float | None
    util_p95: float | None
    sources: frozenset[str]
    gpus: int  # GPUs seen in any sample
    waiting: tuple[int, ...]  # GPUs that spent most of the window not working
    throttled: dict[tuple[int, int], int]  # (gpu index, reasons) -> samples
    seen_at: dict[int, int]  # gpu index -> samples it was read in
    not_working_at: dict[int, int]  # gpu index -> UNITs it did not work
    spinning_at: dict[int, int]  # gpu index -> UNITs it spun

    def share(self, count: float) -> float:
        return count / self.gpu_samples if self.gpu_samples else 0.0


_N = attrgetter("n")
_COUNTED = tuple(map(attrgetter, ("n", "working", "spinning", "starved")))
_SEEN = attrgetter("seen")
_NOT_WORKING = attrgetter("not_working")
_SPINNING_AT = attrgetter("spinning_at")
_THROTTLED = attrgetter("throttled")
_SOURCES = attrgetter("sources")
_SUMMED = tuple(map(attrgetter, ("work_sum", "spin_util_sum", "spin_work_sum")))
_UTILS = attrgetter("utils")


def combine(tallies: Sequence[GpuTally]) -> GpuWindow:
    """The window's tallies added up."""
    return RunningTallies().combine(tallies)


class RunningTallies:
    """``combine`` of a sliding window's tallies, kept up to date as the window slides: the counts
    (GPU samples, the GPUs seen, waiting and throttled, utilization values) by adding the tallies
    that enter and subtracting those that leave; the float sums are summed afresh in window order,
    so the result is exactly ``combine``'s."""

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._in: deque[GpuTally] = deque()
        self._counts = [0, 0, 0, 0]  # GPU samples, working, spinning, starved
        # a window's samples mostly share a handful of these (the same GPUs up, the same ones
        # waiting): counted as whole tuples, spread over their members at each evaluation
        self._seen: dict[tuple[int, ...], int] = {}
        self._not_working: dict[tuple[tuple[int, int], ...], int] = {}  # (gpu, UNITs not working)
        self._spinning_at: dict[tuple[tuple[int, int], ...], int] = {}  # (gpu, UNITs spinning)
        self._throttled: dict[tuple[tuple[int, int], ...], int] = {}
        self._sources: dict[frozenset[str], int] = {}
        self._utils: dict[float, int] = {}  # each value

    def combine(self, tallies: Sequence[GpuTally]) -> GpuWindow:
        self._slide(tallies)
        ts = list(filter(_N, tallies))
        work_sum, spin_util_sum, spin_work_sum = (sum(map(get, ts)) for get in _SUMMED)
        gpu_samples, working, spinning, starved = self._counts
        util_mean = util_p5 = util_p95 = None
        if gpu_samples:
            util_mean = sum(chain.from_iterable(map(_UTILS, ts))) / gpu_samples
            util_p5, util_p95 = _ranks(self._utils, gpu_samples, (0.05, 0.95))
        seen, not_working = _members(self._seen), _weighted(self._not_working)
        return GpuWindow(
            gpu_samples=gpu_samples,
            working=working / UNIT,
            spinning=spinning / UNIT,
            starved=starved / UNIT,
            work_sum=work_sum,
            spin_util_sum=spin_util_sum,
            spin_work_sum=spin_work_sum,
            util_mean=util_mean,
            util_p5=util_p5,
            util_p95=util_p95,
            sources=frozenset().union(*self._sources),
            gpus=len(seen),
            waiting=tuple(sorted(i for i, k in not_working.items() if k * 2 > seen.get(i, 0) * UNIT)),
            throttled=_members(self._throttled),
            seen_at=seen,
            not_working_at=not_working,
            spinning_at=_weighted(self._spinning_at),
        )

    def push(self, t: GpuTally) -> None:
        """``t`` enters at the window's end ahead of the next ``combine`` (which checks it)."""
        if self._in:  # else the next combine counts a whole window, in C
            self._in.append(t)
            self._change(t, 1)

    def drop(self, t: GpuTally) -> None:
        """``t`` leaves at the window's start ahead of the next ``combine``."""
        q = self._in
        if q and q[0] is t:
            self._change(q.popleft(), -1)

    def _slide(self, tallies: Sequence[GpuTally]) -> None:
        q = self._in
        if tallies:
            first = tallies[0]
            while q and q[0] is not first:
                self._change(q.popleft(), -1)
        if len(q) > len(tallies) or not all(map(is_, q, tallies)):  # not the same window slid on
            self._clear()
            q = self._in
        if not q:  # a whole window: counted in C
            self._fill(tallies)
            return
        for t in tallies[len(q) :]:
            q.append(t)
            self._change(t, 1)

    def _fill(self, tallies: Sequence[GpuTally]) -> None:
        self._in.extend(tallies)
        ts = list(filter(_N, tallies))
        self._counts = [sum(map(get, ts)) for get in _COUNTED]
        self._seen = dict(Counter(map(_SEEN, ts)))
        self._not_working = dict(Counter(map(_NOT_WORKING, ts)))
        self._spinning_at = dict(Counter(map(_SPINNING_AT, ts)))
        self._throttled = dict(Counter(map(_THROTTLED, ts)))
        self._sources = dict(Counter(map(_SOURCES, ts)))
        self._utils = dict(Counter(chain.from_iterable(map(_UTILS, ts))))

    def _change(self, t: GpuTally, k: int) -> None:
        if not t.n:
            return
        c = self._counts
        c[0] += k * t.n
        c[1] += k * t.working
        c[2] += k * t.spinning
        c[3] += k * t.starved
        # inline: this runs for every tally entering or leaving the window
        groups: tuple[tuple[dict[Any, int], Hashable], ...] = (
            (self._seen, t.seen),
            (self._not_working, t.not_working),
            (self._spinning_at, t.spinning_at),
            (self._throttled, t.throttled),
            (self._sources, t.sources),
        )
        for table, key in groups:
            left = table.get(key, 0) + k
            if left:
                table[key] = left
            else:
                del table[key]
        utils = self._utils
        for x in t.utils:
            left = utils.get(x, 0) + k
            if left:
                utils[x] = left
            else:
                del utils[x]


def _members(groups: dict[tuple[K, ...], int]) -> dict[K, int]:
    """Occurrences of each member of the counted tuples."""
    out: dict[K, int] = {}
    for members, k in groups.items():
        for x in members:
            out[x] = out.get(x, 0) + k
    return out


def _weighted(groups: dict[tuple[tuple[K, int], ...], int]) -> dict[K, int]:
    """Each member's weight, summed over the counted tuples of (member, weight)."""
    out: dict[K, int] = {}
    for members, k in groups.items():
        for x, w in members:
            out[x] = out.get(x, 0) + k * w
    return out


def _ranks(counts: dict[float, int], n: int, qs: tuple[float, ...]) -> list[float]:
    """Nearest-rank quantiles of the ``n`` values counted in ``counts`` (value -> occurrences):
    ``sorted_quantile`` of the sorted values, without sorting them all (utilization takes ~100
    distinct values)."""
    ranks = [min(n - 1, max(0, math.ceil(q * n) - 1)) for q in qs]
    out = []
    seen = 0
    it = iter(sorted(counts.items()))
    value, k = next(it)
    for r in ranks:  # ascending
        while seen + k <= r:
            seen += k
            value, k = next(it)
        out.append(value)
    return out
