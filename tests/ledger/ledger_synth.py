"""Synthetic inputs for the ledger's pure core: GPUs in a given state, and a ledger driven by an
injected clock."""

from __future__ import annotations

from agent.classifier.published import unclassified
from agent.config.classifier import ClassifierSection
from agent.ledger.assign import BUCKETS, INDEX, Bucket, LedgerReading, Pressures, gpu_state
from agent.ledger.book import Book
from agent.ledger.state import Ledger

CFG = ClassifierSection()

# (util, sm) per state, on an H100 with GPM
STATES = {
    "working": (0.97, 0.85),
    "spinning": (0.99, 0.05),
    "starved": (0.10, 0.02),
    "between": (0.50, 0.10),
    "down": (None, None),
}


def gpu(i: int, state: str, busy: bool = True) -> LedgerReading:
    util, sm = STATES[state]
    return LedgerReading(
        uuid=f"GPU-{i}",
        up=state != "down",
        util=util,
        sm=sm,
        power=500.0,
        limit=700.0,
        busy=busy,
    )


def ledger(resolution: float = 10.0, settle: float = 3600.0, keep: float = 86400.0) -> Ledger:
    return Ledger(Book(resolution, settle, keep))


def run(
    led: Ledger,
    t0: float,
    seconds: float,
    states: list[str],
    step: float = 1.0,
    job: bool = True,
    p: Pressures | None = None,
    price: float | None = None,
) -> float:
    """``seconds`` of ticks every ``step`` from wall time ``t0``; returns the wall time at the end."""
    t = t0
    gpus = [gpu(i, s, busy=job) for i, s in enumerate(states)]
    st = [gpu_state(g, unclassified(CFG)) for g in gpus]
    end = t0 + seconds
    while t < end - 1e-9:
        dt = min(step, end - t)
        t += dt
        led.tick(t, dt, gpus, st, job, p or Pressures(), price)
    return t


def everything(led: Ledger) -> dict[str, float]:
    seconds, _ = led.book.everything()
    return dict(zip(BUCKETS, seconds, strict=True))


def bucket(led: Ledger, b: Bucket) -> float:
    seconds, _ = led.book.everything()
    return seconds[INDEX[b]]
