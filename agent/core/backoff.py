"""Capped exponential backoff: the one rule every retry in the agent waits by (the supervisor's
restarts, the metadata reads, the chat deliveries, NVML's initialisation, a lost GPU's probes and
the Xid event wait).

The n-th failure in a row waits ``base * 2**(n-1)``, capped at ``cap``, with "equal jitter": a
random point in the upper half of that. The jitter only shortens a wait, so the cap holds (a spot
notice is seen within it once the service answers), and nodes that failed together spread out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

_MAX_DOUBLINGS = 60  # far past any cap; keeps 2**n a float that does not overflow


def delay(failures: int, base: float, cap: float) -> float:
    """The wait after the ``failures``-th failure in a row (1 for the first)."""
    grown = min(cap, base * 2.0 ** min(max(0, failures - 1), _MAX_DOUBLINGS))
    return grown / 2 + random.uniform(0.0, grown / 2)


@dataclass(slots=True)
class Backoff:
    """The failures in a row of one retry loop, and the next wait."""

    base: float
    cap: float
    failures: int = 0

    def next(self) -> float:
        """One more failure: how long to wait before the next try."""
        self.failures += 1
        return delay(self.failures, self.base, self.cap)

    def reset(self) -> None:
        """It worked (or ran long enough): the next failure waits ``base`` again."""
        self.failures = 0
