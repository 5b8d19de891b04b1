"""Which GPUs are read in GPM windows inside the tick, and in how many (pure).

A training step is 0.1-2 s. A tick's one GPM mean of a GPU that computed half of it and spun in a
collective for the rest reads SM 41% at full busy, and the classifier can only split that mean
against the GPU's full-work level. Read in three 333 ms windows, the same tick says which stretches
worked and which spun, each against that level (docs/gpu.md, "Reading sources").

Windows cost NVML calls and a thread's wake-ups on the node we exist to spare, so they are taken
where they can say more than the mean: not for an idle GPU, and for a GPU whose windows came out
alike (a steady compute job, or steps so short that each window holds the same mix) only every
``STEADY_TICKS`` ticks, or as soon as its mean moves.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agent.sources.gpu.part import ActivityWindow

MAX_WINDOWS = 3  # per tick: 333 ms windows at the default 1 s interval
MIN_WINDOW = 0.2  # seconds: GPM's 100 ms floor, with room for the clock's and the tick's jitter
IDLE_BUSY = 0.02  # kernels ran less than this share of the tick: idle, nothing to split
STEADY = 0.05  # windows this close to each other (busy and work) say nothing their mean does not
STEADY_TICKS = 10  # a steady GPU is read in windows again after so many ticks


def windows_per_tick(interval: float) -> int:
    """Windows a tick of ``interval`` seconds is read in (1: the tick's own samples only)."""
    n = min(MAX_WINDOWS, int(interval / MIN_WINDOW + 0.05))  # + 0.05: a tick measured a hair short
    return n if n >= 2 else 1


@dataclass
class WindowCadence:
    """Whether a GPU's next tick is read in windows, from what this one showed. Steady is windows
    alike within a tick and a mean like the tick's before: a job whose phases fill whole ticks has
    uniform windows in each and means that swing, and stays read in windows."""

    rest: int = 0  # ticks left before a steady GPU is read in windows again
    level: tuple[float, float] | None = None  # (busy, work) of its last steady windows
    previous: tuple[float, float] | None = None  # (busy, work) of the tick before

    def next(self, busy: float | None, work: float | None, windows: Sequence[ActivityWindow]) -> bool:
        previous, self.previous = self.previous, None
        if busy is None or work is None or busy < IDLE_BUSY:
            self.rest, self.level = 0, None
            return False
        self.previous = (busy, work)
        if len(windows) >= 2:
            alike = _spread(w.busy for w in windows) < STEADY and _spread(w.work for w in windows) < STEADY
            if alike and previous is not None and _near((busy, work), previous):
                self.rest, self.level = STEADY_TICKS, (busy, work)
                return False
            self.rest, self.level = 0, None
            return True
        if self.level is None or not _near((busy, work), self.level):
            self.rest, self.level = 0, None
            return True
        self.rest -= 1
        return self.rest <= 0


def _near(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return abs(a[0] - b[0]) < STEADY and abs(a[1] - b[1]) < STEADY


def _spread(values: Iterable[float]) -> float:
    vs = list(values)
    return max(vs) - min(vs)
