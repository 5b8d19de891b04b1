"""How one GPU sample's time divides (pure): *working* (real work: SM activity from GPM, else power
above idle), *spinning* (a kernel ran without real work: a collective waiting, as NCCL does),
*starved* (no kernel ran: nothing to feed it). A real GPU averages its readings over time (the
utilization buffer over the tick, power over 1 s or the energy counter's delta, GPM between two
samples), and a training step is 0.1-2 s, so a sample almost always holds a mix: it is split into
shares, not put in one class. ``utilization.gpu`` alone is never taken as work.

The share of work is the work measure over the GPU's full-work level: what its SM activity (or
power) reads per second of kernel time when it does nothing but real work (``full_work_sm`` /
``full_work_power``, or the GPU's own learned level where it has shown a higher one). A sample that
spans half a step and half a wait reads SM 41% at a full level of 82%: half working, not all.

Where the collector read GPM in windows inside the sample (``windows``), each window is split on
its own and the shares are their time-weighted sum: a window at full work counts whole even where
its SM activity reads above the full-work level the GPU has learned so far, which a mean of it with
a spin would dilute into a share of work larger than the time it worked."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple, Protocol

from agent.classifier.baselines import Baselines, idle_power
from agent.config.classifier import ClassifierSection
from agent.sources.gpu.part import ActivityWindow


class GpuReading(Protocol):
    """What the rule reads of one GPU sample: the classifier's ``GpuSample`` and the goodput
    ledger's ``LedgerReading`` both are one."""

    @property
    def uuid(self) -> str: ...
    @property
    def up(self) -> bool: ...
    @property
    def util(self) -> float | None: ...  # share of the tick a kernel ran
    @property
    def sm(self) -> float | None: ...  # GPM SM (or tensor) activity ratio
    @property
    def power(self) -> float | None: ...  # watts
    @property
    def limit(self) -> float | None: ...  # enforced power limit, watts
    @property
    def windows(self) -> tuple[ActivityWindow, ...]: ...  # GPM inside the sample, where read so


class GpuClass(StrEnum):
    """The largest share of one sample (the goodput ledger's and ``top``'s word for it)."""

    WORKING = "working"
    SPINNING = "spinning"
    STARVED = "starved"
    DOWN = "down"


class Shares(NamedTuple):
    """How one GPU sample's time divides; the three add up to 1."""

    working: float
    spinning: float
    starved: float
    work: float  # the raw work measure 0-1 (SM activity, or power above idle over the span)
    source: str  # sm | power | utilization


def work_of(g: GpuReading, baselines: Baselines, cfg: ClassifierSection) -> tuple[float, str]:
    """(real-work measure 0-1, where it came from: sm | power | utilization). ``g`` must be up."""
    if g.sm is not None:
        return g.sm, "sm"
    if g.power is not None and g.limit:
        idle = idle_power(g.uuid, g.limit, baselines, cfg)
        span = g.limit - idle
        return (min(1.0, max(0.0, (g.power - idle) / span)) if span > 0 else 0.0), "power"
    return g.util or 0.0, "utilization"  # nothing but utilization: cannot tell a spin from work


def full_work(uuid: str, source: str, baselines: Baselines, cfg: ClassifierSection) -> float:
    """The work measure of this GPU at full work: the configured default, or the GPU's own learned
    level where it has shown a higher one. Never lower: a collective-bound job's samples mix its
    steps with their spins (26% computing at SM 82% reads SM 24% at utilization 99%), and a GPU that
    learned that as its full work would call a network-bound node compute-bound. A GPU whose real
    full work reads below the default is told so by the config (``full_work_sm``)."""
    default = cfg.full_work_sm if source == "sm" else cfg.full_work_power
    learned = baselines.full_work.get(uuid)
    return default if learned is None or learned < default else learned


def shares(g: GpuReading, util: float, baselines: Baselines, cfg: ClassifierSection) -> Shares:
    """``g`` up with a utilization reading ``util``."""
    work, source = work_of(g, baselines, cfg)
    if source == "utilization":
        return Shares(util, 0.0, 1.0 - util, work, source)
    full = full_work(g.uuid, source, baselines, cfg)
    if source == "sm" and g.windows:
        return _windowed(g.windows, work, full)
    working = min(1.0, work / full)
    # utilization may cover a shorter period than the work measure (the rates fallback): work is
    # kernel time too, so the busy share is the larger of the two
    busy = max(util, working)
    return Shares(working, busy - working, 1.0 - busy, work, source)


def _windowed(windows: tuple[ActivityWindow, ...], work: float, full: float) -> Shares:
    """Each window split against the full-work level (its busy share from the same GPM samples as
    its SM activity), time-weighted."""
    total = working = busy = 0.0
    for w in windows:
        share = min(1.0, w.work / full)
        working += w.seconds * share
        busy += w.seconds * max(w.busy, share)
        total += w.seconds
    working, busy = working / total, busy / total
    return Shares(working, busy - working, 1.0 - busy, work, "sm")


def gpu_shares(g: GpuReading, baselines: Baselines, cfg: ClassifierSection) -> Shares | None:
    """``g``'s shares; None where it is down or has no utilization reading."""
    if not g.up or g.util is None:
        return None
    return shares(g, g.util, baselines, cfg)


def gpu_class(g: GpuReading, baselines: Baselines, cfg: ClassifierSection) -> GpuClass:
    s = gpu_shares(g, baselines, cfg)
    if s is None:
        return GpuClass.DOWN
    if s.working >= s.spinning and s.working >= s.starved:
        return GpuClass.WORKING
    return GpuClass.SPINNING if s.spinning >= s.starved else GpuClass.STARVED
