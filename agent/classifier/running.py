"""Window means of the per-device families from running (prefix) sums.

A sliding window moves by a few samples per evaluation; summing every device of every sample again
each time is most of an evaluation's cost on a large node. Each sample instead stores the running
sum up to it, so a window's sum is one subtraction per series. A new *epoch* starts whenever a
family's devices change (a disk or NIC appears) and every ``REBASE`` samples (so the sums never grow
large enough to lose precision); a window spanning two epochs is summed the plain way instead.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import chain, repeat
from operator import add, attrgetter, is_, sub, truediv

from agent.classifier.families import FAMILIES, FamilyMeans
from agent.classifier.samples import Sample

REBASE = 4096
_FAMILIES = attrgetter(*FAMILIES)
_KEYS = attrgetter("keys")
_VALUES = attrgetter("values")


@dataclass(slots=True)
class _Entry:
    epoch: int
    keys: tuple[tuple[str, ...], ...]  # per family
    # running sums of this epoch's earlier samples, every family's series one after the other (one
    # tuple a tick, not one list per family)
    before: tuple[float, ...]
    after: tuple[float, ...]  # ... including this sample


class RunningSums:
    def __init__(self) -> None:
        self.entries: deque[_Entry] = deque()
        self._epoch = 0
        self._count = 0

    def append(self, s: Sample) -> None:
        series = _FAMILIES(s)
        keys = tuple(map(_KEYS, series))
        last = self.entries[-1] if self.entries else None
        same = (
            last is not None
            and last.epoch == self._epoch
            and self._count < REBASE
            and all(map(is_, keys, last.keys))
        )
        if same:
            assert last is not None
            before = last.after
            self._count += 1
        else:
            self._epoch += 1
            self._count = 1
            before = (0.0,) * sum(map(len, keys))
        after = tuple(map(add, before, chain.from_iterable(map(_VALUES, series))))
        self.entries.append(_Entry(self._epoch, keys, before, after))

    def popleft(self) -> None:
        self.entries.popleft()

    def means(self, n: int) -> FamilyMeans | None:
        """Means over the last ``n`` samples, per family; None when they span two epochs (the caller
        then sums them itself)."""
        if n <= 0 or n > len(self.entries):
            return None
        first, last = self.entries[-n], self.entries[-1]
        if first.epoch != last.epoch:
            return None
        it = map(truediv, map(sub, last.after, first.before), repeat(n))
        # zip takes from the keys first, so each family's dict takes exactly its own means from it
        return FamilyMeans._make([dict(zip(keys, it, strict=False)) for keys in last.keys])
