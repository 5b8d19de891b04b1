"""Typed, immutable pieces of a node snapshot: one part per collector.

Counters are cumulative raw values as the kernel or driver reports them, converted to base units
(bytes, seconds). Per-second rates are derived later (see ``rates.py``) from two snapshots, so the
exporter can publish raw counters and the classifier can read rates.
``None`` always means "not available on this node", never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# --- host -----------------------------------------------------------------------------------------


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
    cpu: CpuTimes | None
    cpu_count: int
    load1: float | None
    load5: float | None
    load15: float | None
    memory_total_bytes: int | None
    memory_available_bytes: int | None
    pressure: dict[str, Pressure] = field(default_factory=dict)  # "cpu" | "io" | "memory"
    malformed_lines: int = 0


# --- GPU ------------------------------------------------------------------------------------------


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


# --- storage --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DiskStat:
    device: str
    reads_completed: int
    reads_merged: int
    sectors_read: int
    read_time_seconds: float
    writes_completed: int
    sectors_written: int
    write_time_seconds: float
    io_in_progress: int
    io_time_seconds: float

    @property
    def read_bytes(self) -> int:
        return self.sectors_read * 512

    @property
    def written_bytes(self) -> int:
        return self.sectors_written * 512


@dataclass(frozen=True, slots=True)
class NfsMount:
    mountpoint: str
    export: str  # "server:/path"
    protocol: str  # "tcp" / "udp" / "rdma"
    fstype: str  # "nfs" / "nfs4"
    read_bytes: int  # bytes: 1st field, reads served to applications (page cache included)
    server_read_bytes: int  # bytes: 5th field, bytes read from the server
    read_ops: int  # per-op READ: operations
    read_rtt_seconds: float  # per-op READ: cumulative RTT
    read_exe_seconds: float  # per-op READ: cumulative execute time


@dataclass(frozen=True, slots=True)
class StoragePart:
    disks: tuple[DiskStat, ...]
    nfs: tuple[NfsMount, ...]
    malformed_lines: int = 0  # in this read
    malformed_lines_total: int = 0  # since the agent started


# --- network --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NicStat:
    """Counters from /proc/net/dev; ``None`` for an interface only sysfs shows (another netns)."""

    device: str
    rx_bytes: int | None
    tx_bytes: int | None
    rx_packets: int | None
    tx_packets: int | None
    rx_drops: int | None
    tx_drops: int | None
    rx_errors: int | None
    tx_errors: int | None
    speed_bytes: int | None  # link capacity in bytes/s; None when unknown and not configured


@dataclass(frozen=True, slots=True)
class RdmaPort:
    device: str
    port: int
    rx_bytes: int | None
    tx_bytes: int | None
    rate_bytes: int | None  # link rate in bytes/s from ports/N/rate
    xmit_wait: int | None = None  # port_xmit_wait ticks
    cnp_sent: int | None = None  # np_cnp_sent (mlx5 hw_counters)
    cnp_handled: int | None = None  # rp_cnp_handled
    out_of_buffer: int | None = None


@dataclass(frozen=True, slots=True)
class NetworkPart:
    nics: tuple[NicStat, ...]
    rdma: tuple[RdmaPort, ...]
    malformed_lines: int = 0  # in this read
    malformed_lines_total: int = 0  # since the agent started


# --- training processes ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcessStat:
    """A training process together with its live descendants (data-loader workers)."""

    pid: int
    start_time_ticks: int  # field 22 of /proc/<pid>/stat, identifies the process across pid reuse
    comm: str
    # utime+stime of the process and its live descendants, plus their reaped children's
    # (cutime+cstime), so data-loader workers restarting every epoch don't make it go backwards
    cpu_seconds: float
    read_bytes: int | None  # /proc/<pid>/io read_bytes (block layer and NFS), summed over the tree
    rchar: int | None  # /proc/<pid>/io rchar: covers FUSE (ossfs) and page-cache reads too
    allowed_cores: float  # min(cpuset size, cgroup cpu quota)
    threads: int = 1
    descendants: int = 0


@dataclass(frozen=True, slots=True)
class ProcessPart:
    processes: tuple[ProcessStat, ...]
    malformed_lines: int = 0  # in this read
    malformed_lines_total: int = 0  # since the agent started
