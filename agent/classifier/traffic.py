"""Is this node's link what the waiting GPUs wait for? Decided from the traffic itself (pure).

The speed a NIC reports is an upper bound, not its capacity: a cloud instance's bandwidth cap sits
in the hypervisor, far below what the virtual NIC says (a 50 Mbit/s cap under a NIC reporting
10 Gb/s; an instance family capped at a few Gb/s under a 25-100 Gb/s VF). So besides the reported
speed, a link counts as the bottleneck where, per sample:

- **bulk**: the bytes moving while the GPUs wait amount to a real transfer, not a barrier's few KB;
- **contrast**: the link carries far more while the GPUs wait than while they work (where the window
  has enough intervals that worked from end to end to tell);
- **steady**: most waiting samples carry at least half the link's plateau, i.e. the transfer runs
  through the waits instead of bursting at their end (a straggler's all-reduce on a fast link
  finishes in milliseconds and leaves the rest of the wait quiet);
- **at its ceiling**: the rate through the waits is near the most the link has carried, over a
  window (what it sustained: ``baselines.sustained``, learned across windows like a disk's peak).

A sync-wait node on a fast link fails *steady* or *at its ceiling* only when the sampling resolves
its waits (samples shorter than a wait); sampled slower than the steps, a straggler's bulk
all-reduce looks like a capped link. docs/classifier.md says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, pairwise, repeat
from operator import attrgetter, is_, itemgetter, le, mul
from typing import NamedTuple

from agent.classifier.baselines import PEAK_QUANTILE, Baselines, sorted_quantile, sorted_sustained
from agent.classifier.families import CAPACITIES
from agent.classifier.ramp import ramp
from agent.classifier.samples import Sample
from agent.config.classifier import ClassifierSection

KEEP = 2  # links examined per evaluation: the busiest by mean rate (a large node has dozens quiet)
MIN_WORK_WEIGHT = 0.1  # share of GPU samples working below which "contrast" cannot be told


class Traffic(NamedTuple):
    kind: str  # nic | rdma
    name: str
    rate_wait: float  # bytes/s in the samples where the GPUs waited (weighted by how many)
    rate_work: float | None  # ... where they worked; None: too few working samples to tell
    ceiling: float  # bytes/s: the most it has sustained (learned, or in this window)
    ceiling_source: str  # learned | window
    steady: float  # share of waiting weight in samples at >= half this window's plateau
    link: float | None  # the reported speed, bytes/s
    pressure: float

    @property
    def utilization(self) -> float:
        return self.rate_wait / self.ceiling if self.ceiling > 0 else 0.0

    @property
    def contrast(self) -> float | None:
        if self.rate_work is None:
            return None
        return self.rate_wait / self.rate_work if self.rate_work > 0 else float("inf")


def traffic(
    window: Sequence[Sample],
    wait: Sequence[float],
    work: Sequence[float],
    means: dict[str, dict[str, float]],
    links: dict[str, dict[str, float]],
    baselines: Baselines,
    cfg: ClassifierSection,
) -> tuple[Traffic, ...]:
    """``wait``/``work``: per sample, the share of its GPUs waiting (spinning or starved) / working.
    ``means``: kind -> link -> mean bytes/s over the window; ``links``: kind -> reported speeds.
    The busiest links, most pressing first."""
    # a sample's traffic is over the interval before it, its GPU state an instant at its end: an
    # interval counts as waiting (working) as far as its GPUs did at both ends, so a compute phase
    # shorter than the sampling interval lends it no traffic of the waits around it
    wait = _lower_of_pairs(wait)
    work = _lower_of_pairs(work)
    window = window[1:]
    total_wait = sum(wait)
    if total_wait <= 0 or not window:
        return ()
    n = len(window)
    floor = cfg.network_bulk[0] * total_wait / n  # a mean this low cannot carry bulk through the waits
    candidates = sorted(
        ((rate, kind, name) for kind, rates in means.items() for name, rate in rates.items() if rate > floor),
        reverse=True,
    )[:KEEP]
    total_work = sum(work)
    out = []
    for _, kind, name in candidates:
        col = _column(window, kind, name)
        rate_wait = sum(map(mul, col, wait)) / total_wait
        rate_work = None
        if total_work >= MIN_WORK_WEIGHT * n:
            rate_work = sum(map(mul, col, work)) / total_work
        ranked = sorted(col)
        plateau = sorted_quantile(ranked, PEAK_QUANTILE)
        here = sorted_sustained(ranked)
        learned = baselines.peaks.get(kind, {}).get(name, 0.0)
        link = links.get(kind, {}).get(name)
        ceiling, source = (learned, "learned") if learned > here else (here, "window")
        if link:
            ceiling = min(ceiling, link)
        # the waits' weight in the samples at >= half the plateau
        steady = sum(compress(wait, map(le, repeat(0.5 * plateau), col))) / total_wait
        contrast = 1.0
        if rate_work is not None:
            contrast = ramp(rate_wait / rate_work if rate_work > 0 else float("inf"), cfg.network_contrast)
        pressure = (
            ramp(rate_wait / ceiling if ceiling > 0 else 0.0, cfg.network_utilization)
            * ramp(rate_wait, cfg.network_bulk)
            * ramp(steady, cfg.network_steady)
            * contrast
        )
        if rate_wait >= cfg.network_bulk[0]:  # less is a barrier's few KB: no evidence either way
            out.append(Traffic(kind, name, rate_wait, rate_work, ceiling, source, steady, link, pressure))
    out.sort(key=lambda x: x.pressure, reverse=True)
    return tuple(out)


_FAMILY = {c.kind: attrgetter(c.family) for c in CAPACITIES}  # a link kind's column of the samples


def _column(window: Sequence[Sample], kind: str, name: str) -> list[float]:
    """One link's rate in each sample; by position where the samples share their key tuple."""
    fam = list(map(_FAMILY[kind], window))
    keys = fam[0].keys
    if name in keys and all(map(is_, map(_KEYS, fam), repeat(keys))):
        return list(map(itemgetter(keys.index(name)), map(_VALUES, fam)))
    return [f.get(name) for f in fam]


_KEYS = attrgetter("keys")
_VALUES = attrgetter("values")


def _lower_of_pairs(xs: Sequence[float]) -> list[float]:
    """``min`` of each pair of neighbours (a conditional: ``map(min, ...)`` costs several times it)."""
    return [b if b < a else a for a, b in pairwise(xs)]
