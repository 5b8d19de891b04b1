"""The GPU source's per-second rates: PCIe and NVLink traffic per GPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import ClassVar

from agent.snapshot.rates import pairs, rates
from agent.sources.gpu.part import GpuPart

_INDEX = attrgetter("index")


@dataclass(frozen=True, slots=True)
class GpuRates:
    source: ClassVar[str] = "gpu"  # its source: snap.rates.of(GpuRates) finds it by this

    gpu_pcie_rx: dict[int, float] = field(default_factory=dict)  # gpu index -> bytes/s
    gpu_pcie_tx: dict[int, float] = field(default_factory=dict)
    gpu_nvlink_rx: dict[int, float] = field(default_factory=dict)
    gpu_nvlink_tx: dict[int, float] = field(default_factory=dict)


def gpu_rates(prev: GpuPart, cur: GpuPart, dt: float) -> GpuRates:
    gpus = pairs(prev.gpus, cur.gpus, _INDEX)
    return GpuRates(
        gpu_pcie_rx=rates(gpus, attrgetter("pcie_rx_bytes"), dt),
        gpu_pcie_tx=rates(gpus, attrgetter("pcie_tx_bytes"), dt),
        gpu_nvlink_rx=rates(gpus, attrgetter("nvlink_rx_bytes"), dt),
        gpu_nvlink_tx=rates(gpus, attrgetter("nvlink_tx_bytes"), dt),
    )
