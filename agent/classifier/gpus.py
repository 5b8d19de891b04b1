"""What one GPU sample is doing, by the classifier's rule (pure): *working* (real work: SM activity
from GPM, else power above idle relative to the limit), *spinning* (utilization high without real
work: a collective waiting, as NCCL does), *starved* (utilization low: nothing to run), *between*
the two, or *down* (lost, or no reading). ``utilization.gpu`` alone is never taken as work."""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from agent.classifier.baselines import Baselines, idle_power
from agent.config.classifier import ClassifierSection


class GpuReading(Protocol):
    """What the rule reads of one GPU sample: the classifier's ``GpuSample`` and the goodput
    ledger's own reading both are one."""

    @property
    def uuid(self) -> str: ...
    @property
    def up(self) -> bool: ...
    @property
    def util(self) -> float | None: ...  # utilization.gpu ratio
    @property
    def sm(self) -> float | None: ...  # GPM SM (or tensor) activity ratio
    @property
    def power(self) -> float | None: ...  # watts
    @property
    def limit(self) -> float | None: ...  # enforced power limit, watts


class GpuClass(StrEnum):
    WORKING = "working"
    SPINNING = "spinning"
    STARVED = "starved"
    BETWEEN = "between"
    DOWN = "down"


def work_of(g: GpuReading, baselines: Baselines, cfg: ClassifierSection) -> tuple[float, bool, str]:
    """(real-work measure 0-1, whether that is work, where it came from: sm | power | utilization).
    ``g`` must be up with a utilization reading."""
    if g.sm is not None:
        return g.sm, g.sm >= cfg.busy_sm_active, "sm"
    if g.power is not None and g.limit:
        idle = idle_power(g.uuid, g.limit, baselines, cfg)
        span = g.limit - idle
        work = min(1.0, max(0.0, (g.power - idle) / span)) if span > 0 else 0.0
        return work, work >= cfg.busy_power_ratio, "power"
    util = g.util or 0.0  # nothing but utilization: cannot tell a spin from work
    return util, util >= cfg.spin_utilization, "utilization"


def gpu_class(g: GpuReading, baselines: Baselines, cfg: ClassifierSection) -> GpuClass:
    if not g.up or g.util is None:
        return GpuClass.DOWN
    if work_of(g, baselines, cfg)[1]:
        return GpuClass.WORKING
    if g.util >= cfg.spin_utilization:
        return GpuClass.SPINNING
    return GpuClass.STARVED if g.util < cfg.starved_utilization else GpuClass.BETWEEN
