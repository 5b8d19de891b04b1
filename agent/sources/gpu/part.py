"""The GPU source's snapshot part: one entry per GPU, as NVML reports it.

Counters are cumulative raw values as the kernel or driver reports them, converted to base units
(bytes, seconds); ``None`` always means "not available on this node", never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, ClassVar, NamedTuple

from agent.sources.gpu.reasons import ClockReason


class GpuReadingSource(StrEnum):
    """Where one GPU figure of a tick came from (``GpuStats.utilization_source``/``power_source``),
    best first; docs/gpu.md says what each is worth."""

    SAMPLES = "samples"  # the driver's utilization buffer, time-weighted over the tick
    SAMPLES_IDLE = "samples-idle"  # the buffer held nothing new: no kernel ran all tick
    RATES = "rates"  # nvmlDeviceGetUtilizationRates: the last sample period only
    GPM = "gpm"  # GPM graphics activity between two samples (MIG, or no utilization call)
    ENERGY = "energy"  # the energy counter's delta over the tick: the exact mean
    AVERAGE = "average"  # nvmlDeviceGetPowerUsage: 1 s mean on Ampere and later, else the instant's
    COUNTERS = "counters"  # the clocks event counters' deltas: how long each reason held over the tick
    BITS = "bits"  # the clocks event reason bits sampled at the tick: 1 or 0 for all of it
    NONE = "none"  # the GPU gives no such figure


class NvlinkCounter(StrEnum):
    """NVML's NVLink error counters, each summed over the GPU's links (the ``counter`` label of
    ``training_node_gpu_nvlink_errors_total``)."""

    CRC_FLIT = "crc_flit"  # flow-control units failing their CRC, each then replayed
    CRC_DATA = "crc_data"  # data packets failing their CRC
    REPLAY = "replay"  # retransmissions
    RECOVERY = "recovery"  # a link retrained after errors: traffic stalls meanwhile


class ActivityWindow(NamedTuple):
    """GPM between two samples inside a tick (``gpm_windows.py``): a stretch of the tick's activity."""

    seconds: float
    busy: float  # share of it a kernel ran (GPM graphics activity), 0-1
    work: float  # SM activity 0-1 (tensor activity where the GPU gives no SM activity)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None


class Figure(NamedTuple):
    """How one GPU figure is shown, declared once beside its field: ``metrics.py`` renders the
    metric and ``status.py`` the status key from it (``tests/gpu/test_gpu_figures.py`` names a field
    that is shown nowhere, and a classifier input that no figure feeds)."""

    metric: str  # training_node_gpu_<metric> (a counter gets _total)
    help: str
    status: str | None = None  # its key in each GPU's status (None: not there; "": the metric's name)
    counter: bool = False  # cumulative

    def status_key(self) -> str | None:
        return self.metric if self.status == "" else self.status


def figure(metric: str, help: str, status: str | None = "", counter: bool = False) -> Any:
    """A GpuStats field shown as ``metric`` (and in the status as ``status``); None by default."""
    return field(default=None, metadata={"figure": Figure(metric, help, status, counter)})


@dataclass(frozen=True, slots=True)
class GpuStats:
    index: int = field(metadata={"by_hand": "the gpu label"})
    uuid: str = field(metadata={"by_hand": "the uuid label"})
    model: str = field(metadata={"by_hand": "the model label"})
    # False once NVML says GPU_IS_LOST, or while a call for it hangs (unresponsive_seconds says so)
    up: bool = field(metadata={"by_hand": "training_node_gpu_up"})
    utilization: float | None = figure(
        "utilization_ratio",
        "Share of the tick a kernel ran: the driver's sample buffer time-weighted, else utilization.gpu.",
    )
    memory_utilization: float | None = figure(
        "memory_utilization_ratio", "Share of time device memory was read or written (utilization.memory)."
    )
    memory_used_bytes: int | None = figure("memory_used_bytes", "Device memory in use.")
    memory_total_bytes: int | None = figure("memory_total_bytes", "Device memory size.")
    power_watts: float | None = figure(
        "power_watts",
        "Mean power draw over the tick, or the utilization figure's span where longer (the energy"
        " counter's delta, else NVML's power).",
    )
    power_limit_watts: float | None = figure("power_limit_watts", "Enforced power limit.")
    temperature_celsius: float | None = figure("temperature_celsius", "GPU core temperature.")
    sm_clock_hertz: float | None = figure("sm_clock_hertz", "SM clock.")
    clocks_event_reasons: int | None = figure(  # NVML bit set
        "clocks_event_reasons",
        "NVML clocks event (throttle) reasons as a bit set; see training_node_gpu_clocks_event_active.",
    )
    pcie_tx_bytes: int | None = figure("pcie_tx_bytes", "Bytes transmitted over PCIe.", None, counter=True)
    pcie_rx_bytes: int | None = figure("pcie_rx_bytes", "Bytes received over PCIe.", None, counter=True)
    nvlink_tx_bytes: int | None = figure(
        "nvlink_tx_bytes", "Bytes transmitted over NVLink, all links.", None, counter=True
    )
    nvlink_rx_bytes: int | None = figure(
        "nvlink_rx_bytes", "Bytes received over NVLink, all links.", None, counter=True
    )
    sm_active: float | None = figure("sm_active_ratio", "GPM: share of SMs busy over the last interval.")
    tensor_active: float | None = figure(
        "tensor_active_ratio", "GPM: tensor pipe activity over the last interval."
    )
    dram_active: float | None = figure(
        "dram_active_ratio", "GPM: DRAM bandwidth utilization over the last interval."
    )
    graphics_active: float | None = figure(
        "graphics_active_ratio",
        "GPM: share of the last interval a kernel ran, between the same two samples as SM activity.",
    )
    ecc_uncorrected_total: int | None = figure(
        "ecc_uncorrected_errors",
        "Uncorrectable ECC errors since the driver loaded (volatile).",
        "ecc_uncorrected_total",
        counter=True,
    )
    ecc_corrected_total: int | None = figure(
        "ecc_corrected_errors",
        "Corrected (single-bit) ECC errors since the driver loaded (volatile); a rising rate is a fault.",
        "ecc_corrected_total",
        counter=True,
    )
    row_remap_failure: bool | None = figure(
        "row_remap_failure", "1 when row remapping failed: the GPU needs service."
    )
    # shown by metrics.py and status.py in ways of their own ("by_hand": how)
    processes: tuple[GpuProcess, ...] = field(default=(), metadata={"by_hand": "a count, a series per pid"})
    xid_counts: dict[int, int] = field(  # xid -> cumulative count
        default_factory=dict, metadata={"by_hand": "a series per Xid"}
    )
    pci_bus_id: str | None = field(default=None, metadata={"by_hand": "a label of training_node_gpu_info"})
    # counter -> cumulative count over all links; a counter the GPU has not (no NVLink) is absent
    nvlink_errors: dict[NvlinkCounter, int] = field(
        default_factory=dict, metadata={"by_hand": "a series per counter"}
    )
    row_remap_pending: bool | None = figure(
        "row_remap_pending", "1 when a row remap waits for a GPU reset.", None
    )
    # where utilization and power came from this tick (readings.py): a share of the whole tick from
    # the driver's buffer and energy counter where it has them, else one period's or 1 s's reading
    utilization_source: GpuReadingSource = field(
        default=GpuReadingSource.NONE, metadata={"by_hand": "a label of training_node_gpu_info"}
    )
    utilization_samples: int | None = figure(
        "utilization_samples",
        "Samples of the driver's utilization buffer the tick's utilization was made of.",
        None,
    )
    power_source: GpuReadingSource = field(
        default=GpuReadingSource.NONE, metadata={"by_hand": "a label of training_node_gpu_info"}
    )
    # nanoseconds each reason held since the driver loaded, where the driver counts them (clock_events.py)
    clocks_event_ns: dict[ClockReason, int] = field(
        default_factory=dict, metadata={"by_hand": "training_node_gpu_clocks_event_seconds_total"}
    )
    # the share of the tick each counted reason held, and whether from the counters or the bits
    clocks_event_share: dict[ClockReason, float] = field(
        default_factory=dict, metadata={"by_hand": "the status's clocks_event_share"}
    )
    clocks_event_source: GpuReadingSource = field(
        default=GpuReadingSource.NONE, metadata={"by_hand": "a label of training_node_gpu_info"}
    )
    # the GPU's links and limits against their max: read with the slow reads (collector.SLOW_SECONDS)
    pcie_link_generation: int | None = figure("pcie_link_generation", "PCIe link generation now.")
    pcie_link_generation_max: int | None = figure(
        "pcie_link_generation_max", "Highest PCIe generation the GPU and the system support."
    )
    pcie_link_width: int | None = figure("pcie_link_width", "PCIe link width (lanes) now.")
    pcie_link_width_max: int | None = figure(
        "pcie_link_width_max", "Widest PCIe link the GPU and the system support (lanes)."
    )
    nvlink_links_active: int | None = figure("nvlink_links_active", "NVLink links active.")
    nvlink_links: int | None = figure("nvlink_links", "NVLink links present (answering NVML at open).")
    power_default_limit_watts: float | None = figure(
        "power_default_limit_watts", "Power limit the GPU boots with (its default)."
    )
    sm_clock_max_hertz: float | None = figure("sm_clock_max_hertz", "Highest SM clock the GPU supports.")
    unresponsive_seconds: float | None = figure(
        "unresponsive_seconds",
        "How long an NVML call for this GPU has run without returning; absent while the GPU answers.",
    )
    # GPM over the windows inside the tick, where it was read in more than one (else empty: the
    # tick's SM and graphics activity are one mean between the ticks' own samples)
    activity_windows: tuple[ActivityWindow, ...] = field(
        default=(), metadata={"by_hand": "the status's readings (how many); the classifier's shares"}
    )
    power_instant_watts: float | None = figure(
        "power_instant_watts",
        "Power draw at the instant of the read (NVML_FI_DEV_POWER_INSTANT); power_watts is the tick's mean.",
    )

    @property
    def hung(self) -> bool:
        """Its NVML calls do not return: no figures, but not lost (it may answer again)."""
        return self.unresponsive_seconds is not None

    @property
    def lost(self) -> bool:
        """Fallen off the bus (NVML: GPU is lost)."""
        return not self.up and self.unresponsive_seconds is None


FIGURES: tuple[tuple[str, Figure], ...] = tuple(
    (f.name, f.metadata["figure"]) for f in fields(GpuStats) if "figure" in f.metadata
)


@dataclass(frozen=True, slots=True)
class GpuPart:
    source: ClassVar[str] = "gpu"  # its source: snap.part(GpuPart) finds it by this

    driver_version: str | None
    nvml_version: str | None
    gpus: tuple[GpuStats, ...]


def kernel_share(g: GpuStats) -> float | None:
    """The share of the tick a kernel ran, over the same span as the GPU's real-work measure: GPM's
    graphics activity where GPM gives SM activity (both between the same two samples), else
    ``utilization``. The driver's utilization covers its own sample period (1/6 s to 1 s): at a tick
    shorter than that it still counts the kernels of steps the SM activity no longer shows, and the
    classifier would read the difference as spinning (a collective's busy-wait) that never was."""
    if g.graphics_active is not None and (g.sm_active is not None or g.tensor_active is not None):
        return g.graphics_active
    return g.utilization
