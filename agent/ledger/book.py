"""The ledger's book: GPU-seconds and money per bucket in time slots, settled after ``settle``.

Some of what a second was worth is only known later: a periodic checkpoint is reported after it
became durable (with how long it took), and the work since the last durable checkpoint turns out to
be lost only when a reclaim's final checkpoint misses. So the newest slots stay *unsettled* for
``settle`` seconds, and these late facts move seconds between their buckets; older slots are added
to the settled totals once and never change again. The exported counters are the settled totals (so
they only ever grow) and the unsettled slots are a gauge beside them; both together always add up
to every second the ledger was given.

Each slot also keeps its seconds and money by scheduler job (``no-job`` where none): every move
between buckets moves each job's share, so the jobs' vectors always add up to the slot's, and the
work lost at a reclaim is charged to the jobs that had done it.

Pure: the clock comes in with every call.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from agent.ledger.assign import BUCKETS, INDEX, NO_JOB, Bucket, N

MAX_JOB_KEY = 64


@dataclass(slots=True)
class Slot:
    start: float  # wall time, a multiple of the resolution
    seconds: list[float] = field(default_factory=lambda: [0.0] * N)
    cost: list[float] = field(default_factory=lambda: [0.0] * N)
    # job key -> (seconds, cost) per bucket; they add up to ``seconds`` and ``cost``
    jobs: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)

    def to_json(self) -> list[Any]:
        return [
            self.start,
            [round(x, 6) for x in self.seconds],
            [round(x, 9) for x in self.cost],
            {k: [[round(x, 6) for x in a], [round(x, 9) for x in b]] for k, (a, b) in self.jobs.items()},
        ]

    @classmethod
    def from_json(cls, v: Any) -> Slot:
        if not (isinstance(v, list) and len(v) in (3, 4)):
            raise ValueError(f"a slot is [start, seconds, cost, jobs], got {str(v)[:60]}")
        slot = cls(_number(v[0], "slot start"), _vector(v[1]), _vector(v[2]))
        if len(v) == 3:  # written before the ledger knew jobs: all of it no job's
            slot.jobs = {NO_JOB: (list(slot.seconds), list(slot.cost))}
            return slot
        if not isinstance(v[3], dict):
            raise ValueError("a slot's jobs are not a table")
        for k, pair in v[3].items():
            if not isinstance(k, str) or not k or len(k) > MAX_JOB_KEY:
                raise ValueError(f"a job key is not a short string: {str(k)[:80]!r}")
            if not (isinstance(pair, list) and len(pair) == 2):
                raise ValueError("a job's entry is [seconds, cost]")
            slot.jobs[k] = (_vector(pair[0]), _vector(pair[1]))
        return slot


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"{what} is not a finite number: {v!r}")
    return float(v)


def _vector(v: Any) -> list[float]:
    if not isinstance(v, list) or len(v) != N:
        raise ValueError(f"expected {N} numbers, one per bucket")
    out = [_number(x, "a bucket value") for x in v]
    if any(x < 0 for x in out):
        raise ValueError("a bucket value is negative")
    return out


def add(a: list[float], b: Iterable[float]) -> None:
    for i, x in enumerate(b):
        a[i] += x


class Book:
    def __init__(self, resolution: float, settle: float, keep: float) -> None:
        self.resolution = resolution
        self.settle = settle
        self.keep = max(keep, settle + resolution)
        self.slots: deque[Slot] = deque()
        self.settled = 0  # slots[:settled] are in the totals
        self.seconds = [0.0] * N  # settled totals
        self.cost = [0.0] * N
        self.unmovable = 0.0  # lost work that was older than settle: it stays where it was counted
        # JSON text of slots[:len(_texts)], all settled: a settled slot never changes again, so the
        # file is written without turning days of history into text every save (11,520 slots at 1m)
        self._texts: deque[str] = deque()

    # --- input -------------------------------------------------------------------------------------

    def record(
        self,
        wall: float,
        seconds: list[float],
        cost: list[float] | None,
        jobs: dict[str, list[float]] | None = None,
        gpu_price: float | None = None,
    ) -> None:
        """One tick at ``wall`` (``cost`` None: unpriced), with its seconds by job (``jobs``, which
        add up to ``seconds``; None: all of it ``no-job``) priced at ``gpu_price`` a GPU-second. It
        goes to the slot holding that time, never to a settled slot (a clock stepped back lands in
        the oldest unsettled one)."""
        start = math.floor(wall / self.resolution) * self.resolution
        if self.settled:
            start = max(start, self.slots[self.settled - 1].start + self.resolution)
        slot = self._slot(start)
        add(slot.seconds, seconds)
        if cost is not None:
            add(slot.cost, cost)
        for key, v in (jobs if jobs is not None else {NO_JOB: seconds}).items():
            entry = slot.jobs.get(key)
            if entry is None:
                entry = slot.jobs[key] = ([0.0] * N, [0.0] * N)
            add(entry[0], v)
            if cost is not None:
                # the job's share of the tick's money: its GPU-seconds at the tick's price
                price = gpu_price if gpu_price is not None else _price(seconds, cost)
                add(entry[1], (x * price for x in v))

    def _slot(self, start: float) -> Slot:
        i = len(self.slots)
        while i > self.settled and self.slots[i - 1].start > start:
            i -= 1
        if i > self.settled and self.slots[i - 1].start == start:
            return self.slots[i - 1]
        slot = Slot(start)
        self.slots.insert(i, slot)
        return slot

    def settle_until(self, now: float) -> None:
        """Settle every slot that ended ``settle`` seconds ago; drop slots older than ``keep``."""
        edge = now - self.settle
        while self.settled < len(self.slots) and self.slots[self.settled].start + self.resolution <= edge:
            s = self.slots[self.settled]
            add(self.seconds, s.seconds)
            add(self.cost, s.cost)
            self.settled += 1
        while self.settled and self.slots[0].start + self.resolution < now - self.keep:
            self.slots.popleft()
            self.settled -= 1
            if self._texts:
                self._texts.popleft()

    def settle_all(self) -> None:
        self.settle_until(math.inf)

    def move(
        self,
        sources: Iterable[Bucket],
        to: Bucket,
        t0: float,
        t1: float,
        limit: float = math.inf,
        by_job: dict[str, float] | None = None,
    ) -> tuple[float, float]:
        """Move up to ``limit`` GPU-seconds counted between ``t0`` and ``t1`` from ``sources`` to
        ``to`` (a slot partly inside gives its share), each job's part of a bucket in proportion
        (``by_job`` adds up what each job gave). Returns (moved, what would have moved but sat in
        settled slots)."""
        moved = stuck = 0.0
        src = [INDEX[b] for b in sources]
        dst = INDEX[to]
        first_open = self.slots[self.settled].start if self.settled < len(self.slots) else math.inf
        for s in self.recent(t0):
            share = _overlap(s.start, s.start + self.resolution, t0, t1) / self.resolution
            if share <= 0:
                continue
            if s.start < first_open:
                stuck += share * sum(s.seconds[j] for j in src)
                continue
            for j in src:
                take = min(s.seconds[j] * share, limit - moved)
                if take <= 0:
                    continue
                frac = take / s.seconds[j]
                money = s.cost[j] * frac
                s.seconds[j] -= take
                s.cost[j] -= money
                s.seconds[dst] += take
                s.cost[dst] += money
                moved += take
                for key, (js, jc) in s.jobs.items():
                    if js[j] <= 0:
                        continue
                    give, pay = js[j] * frac, jc[j] * frac
                    js[j] -= give
                    jc[j] -= pay
                    js[dst] += give
                    jc[dst] += pay
                    if by_job is not None:
                        by_job[key] = by_job.get(key, 0.0) + give
        return moved, stuck

    # --- views -------------------------------------------------------------------------------------

    def open_slots(self) -> Iterable[Slot]:
        """The unsettled slots, newest first (without walking the settled history)."""
        return islice(reversed(self.slots), len(self.slots) - self.settled)

    def recent(self, t0: float) -> Iterable[Slot]:
        """The slots that end after ``t0``, newest first."""
        for s in reversed(self.slots):
            if s.start + self.resolution <= t0:
                return
            yield s

    def unsettled(self) -> tuple[list[float], list[float]]:
        seconds, cost = [0.0] * N, [0.0] * N
        for s in self.open_slots():
            add(seconds, s.seconds)
            add(cost, s.cost)
        return seconds, cost

    def since(self, t0: float) -> tuple[list[float], list[float], float]:
        """Seconds and money per bucket in the slots from ``t0`` on (whole slots), settled or not,
        and the start of the first slot counted (``t0`` rounded down to the slots kept)."""
        seconds, cost = [0.0] * N, [0.0] * N
        first = math.inf
        for s in self.recent(t0):
            add(seconds, s.seconds)
            add(cost, s.cost)
            first = min(first, s.start)
        return seconds, cost, first

    def jobs_since(self, t0: float) -> dict[str, tuple[list[float], list[float]]]:
        """Seconds and money per bucket of each job in the slots from ``t0`` on (whole slots)."""
        out: dict[str, tuple[list[float], list[float]]] = {}
        for s in self.recent(t0):
            for key, (js, jc) in s.jobs.items():
                entry = out.get(key)
                if entry is None:
                    entry = out[key] = ([0.0] * N, [0.0] * N)
                add(entry[0], js)
                add(entry[1], jc)
        return out

    def everything(self) -> tuple[list[float], list[float]]:
        """Settled totals plus the unsettled slots: every second recorded, as it is known now."""
        us, uc = self.unsettled()
        return [a + b for a, b in zip(self.seconds, us, strict=True)], [
            a + b for a, b in zip(self.cost, uc, strict=True)
        ]

    # --- persistence -------------------------------------------------------------------------------

    def to_json(self, slots: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "seconds": dict(zip(BUCKETS, self.seconds, strict=True)),
            "cost": dict(zip(BUCKETS, self.cost, strict=True)),
            "unmovable": self.unmovable,
            "settled": self.settled,
        }
        if slots:
            d["slots"] = [s.to_json() for s in self.slots]
        return d

    def slot_texts(self) -> list[str]:
        """Every slot as the JSON text ``to_json`` would give it, oldest first; a settled slot's
        text is made once."""
        texts = self._texts
        while len(texts) < self.settled:
            texts.append(_dumps(self.slots[len(texts)].to_json()))
        return [*texts, *(_dumps(s.to_json()) for s in itertools.islice(self.slots, self.settled, None))]

    def to_text(self) -> tuple[str, list[str]]:
        """``to_json`` as text in two pieces, the head without the slots and the slots' texts, put
        together by :func:`join_text` (off the event loop: days of slots are megabytes)."""
        return _dumps(self.to_json(slots=False)), self.slot_texts()

    def load_json(self, d: Any) -> None:
        """Strict: raises ``ValueError`` on anything but the shape ``to_json`` writes."""
        if not isinstance(d, dict):
            raise ValueError("the book is not an object")
        seconds = _named(d.get("seconds"))
        cost = _named(d.get("cost"))
        slots = d.get("slots")
        if not isinstance(slots, list):
            raise ValueError("slots is not a list")
        parsed = [Slot.from_json(x) for x in slots]
        if any(b.start <= a.start for a, b in itertools.pairwise(parsed)):
            raise ValueError("slots are not in time order")
        settled = d.get("settled")
        if not isinstance(settled, int) or isinstance(settled, bool) or not 0 <= settled <= len(parsed):
            raise ValueError(f"settled is not a slot count: {settled!r}")
        self.seconds, self.cost = seconds, cost
        self.unmovable = _number(d.get("unmovable", 0.0), "unmovable")
        self.slots = deque(parsed)
        self.settled = settled
        # at start, not at the first save on the event loop (days of history take a fraction of a second)
        self._texts = deque(_dumps(s.to_json()) for s in itertools.islice(parsed, settled))


def _named(d: Any) -> list[float]:
    if not isinstance(d, dict):
        raise ValueError("bucket totals are not a table")
    unknown = set(d) - set(BUCKETS)
    if unknown:
        raise ValueError(f"unknown bucket {sorted(unknown)[0]!r}")
    return _vector([d.get(b, 0.0) for b in BUCKETS])


def _price(seconds: list[float], cost: list[float]) -> float:
    total = sum(seconds)
    return sum(cost) / total if total > 0 else 0.0


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"))


def join_text(head: str, slots: list[str]) -> str:
    """The book's JSON object from :meth:`Book.to_text`'s pieces."""
    return f'{head[:-1]},"slots":[{",".join(slots)}]}}'
