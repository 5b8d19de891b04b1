"""The GPU source's snapshot part: one entry per GPU, as NVML reports it.

Counters are cumulative raw values as the kernel or driver reports them, converted to base units
(bytes, seconds); ``None`` always means "not available on this node", never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class GpuStats:
    index: int
    uuid: str
    model: str
    up: bool  # False once NVML says GPU_IS_LOST
    utilization: float | None = None  # ratio 0-1 (utilization.gpu)
    memory_utilization: float | None = None  # ratio 0-1 (utilization.memory)
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    temperature_celsius: float | None = None
    sm_clock_hertz: float | None = None
    clocks_event_reasons: int | None = None  # NVML bit set
    pcie_tx_bytes: int | None = None  # cumulative
    pcie_rx_bytes: int | None = None
    nvlink_tx_bytes: int | None = None  # cumulative, all links
    nvlink_rx_bytes: int | None = None
    sm_active: float | None = None  # GPM ratio 0-1, None where unsupported
    tensor_active: float | None = None
    dram_active: float | None = None
    ecc_uncorrected_total: int | None = None
    row_remap_failure: bool | None = None
    processes: tuple[GpuProcess, ...] = ()
    xid_counts: dict[int, int] = field(default_factory=dict)  # xid -> cumulative count
    pci_bus_id: str | None = None
    row_remap_pending: bool | None = None


@dataclass(frozen=True, slots=True)
class GpuPart:
    driver_version: str | None
    nvml_version: str | None
    gpus: tuple[GpuStats, ...]
