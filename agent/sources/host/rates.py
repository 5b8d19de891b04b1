"""The host source's per-second rates: CPU time shares and /proc/pressure stall shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from agent.snapshot.rates import counter_rate
from agent.sources.host.part import HostPart


@dataclass(frozen=True, slots=True)
class HostRates:
    source: ClassVar[str] = "host"  # its source: snap.rates.of(HostRates) finds it by this

    # ratios of all CPU time in the interval
    cpu_busy_ratio: float | None = None
    cpu_iowait_ratio: float | None = None
    cpu_steal_ratio: float | None = None
    # /proc/pressure: share of the interval some (resp. all non-idle) tasks stalled, per resource
    pressure_some_ratio: dict[str, float] = field(default_factory=dict)  # "cpu" | "io" | "memory"
    pressure_full_ratio: dict[str, float] = field(default_factory=dict)


def host_rates(prev: HostPart, cur: HostPart, dt: float) -> HostRates:
    some, full = _pressure_rates(prev, cur, dt)
    if not (prev.cpu and cur.cpu):
        return HostRates(pressure_some_ratio=some, pressure_full_ratio=full)
    total = cur.cpu.total - prev.cpu.total
    if total <= 0:
        return HostRates(pressure_some_ratio=some, pressure_full_ratio=full)

    def share(a: float, b: float) -> float:
        return max(0.0, min(1.0, (a - b) / total))

    return HostRates(
        cpu_busy_ratio=share(cur.cpu.busy, prev.cpu.busy),
        cpu_iowait_ratio=share(cur.cpu.iowait, prev.cpu.iowait),
        cpu_steal_ratio=share(cur.cpu.steal, prev.cpu.steal),
        pressure_some_ratio=some,
        pressure_full_ratio=full,
    )


def _pressure_rates(prev: HostPart, cur: HostPart, dt: float) -> tuple[dict[str, float], dict[str, float]]:
    """PSI stall shares over the interval from the ``total`` counters (the kernel's avg10 lags)."""
    pairs = [(k, prev.pressure.get(k), p) for k, p in cur.pressure.items()]
    some = {k: counter_rate(a.some_total_seconds, b.some_total_seconds, dt) for k, a, b in pairs if a}
    full = {k: counter_rate(a.full_total_seconds, b.full_total_seconds, dt) for k, a, b in pairs if a}
    return (
        {k: min(1.0, v) for k, v in some.items() if v is not None},
        {k: min(1.0, v) for k, v in full.items() if v is not None},
    )
