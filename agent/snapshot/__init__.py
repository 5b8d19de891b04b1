"""The one immutable picture of the node that every consumer reads.

The sampler builds a :class:`NodeSnapshot` every tick from whatever the collectors returned; a collector
that failed or is stuck leaves its part ``None`` for that tick (its series vanish from /metrics, as
node_exporter does) and says why in ``collectors``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.snapshot.parts import GpuPart, HostPart, NetworkPart, ProcessPart, StoragePart
from agent.snapshot.rates import NodeRates


@dataclass(frozen=True, slots=True)
class CollectorStatus:
    name: str
    success: bool
    duration_seconds: float
    error: str | None = None  # one line, no secrets
    absent: bool = False  # the source does not exist on this node (no NVML, no /proc/pressure)
    stuck_seconds: float = 0.0  # how long the current call has been running, 0 if none in flight


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    seq: int
    timestamp: float  # wall clock, seconds since the epoch
    monotonic: float
    host: HostPart | None = None
    gpu: GpuPart | None = None
    storage: StoragePart | None = None
    network: NetworkPart | None = None
    processes: ProcessPart | None = None
    collectors: dict[str, CollectorStatus] = field(default_factory=dict)
    rates: NodeRates = field(default_factory=NodeRates)


__all__ = ["CollectorStatus", "NodeRates", "NodeSnapshot"]
