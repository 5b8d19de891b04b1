"""The host source's snapshot part: /proc/stat CPU times, load, memory, /proc/pressure.

Counters are cumulative raw values as the kernel or driver reports them, converted to base units
(bytes, seconds); ``None`` always means "not available on this node", never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Aggregate ``cpu`` line of /proc/stat, in seconds (USER_HZ already applied)."""

    user: float
    nice: float
    system: float
    idle: float
    iowait: float
    irq: float
    softirq: float
    steal: float

    @property
    def total(self) -> float:
        return (
            self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
        )

    @property
    def busy(self) -> float:
        return self.total - self.idle - self.iowait


@dataclass(frozen=True, slots=True)
class Pressure:
    """One resource of /proc/pressure. ``full`` is None where the kernel has no full line (cpu)."""

    some_avg10: float
    some_avg60: float
    some_avg300: float
    some_total_seconds: float
    full_avg10: float | None = None
    full_avg60: float | None = None
    full_avg300: float | None = None
    full_total_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class HostPart:
    source: ClassVar[str] = "host"  # its source: snap.part(HostPart) finds it by this

    cpu: CpuTimes | None
    cpu_count: int
    load1: float | None
    load5: float | None
    load15: float | None
    memory_total_bytes: int | None
    memory_available_bytes: int | None
    pressure: dict[str, Pressure] = field(default_factory=dict)  # "cpu" | "io" | "memory"
    malformed_lines: int = 0
