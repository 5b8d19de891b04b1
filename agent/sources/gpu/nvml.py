"""The thin NVML layer under the GPU collector (nvitop's ``libnvml`` is the model).

- The library is loaded once, from the configured path or the system's ``libnvidia-ml.so.1``, and
  handed to ``pynvml`` so every call goes through the real binding (``binding.py``).
- Device handles and identities are read once per initialisation.
- A function that is NotSupported on a GPU, or missing from this driver (FunctionNotFound), becomes
  ``None``: it is logged once and never asked again.
- ``NVML_ERROR_GPU_IS_LOST`` becomes :class:`GpuLost`, which the collector turns into that GPU's state.
- Driver-wide errors (Uninitialized, DriverNotLoaded, Unknown ...) raise :class:`NvmlDriverError`;
  the collector shuts NVML down and initialises it again with backoff.

GPM activity is ``nvml_gpm.py``, Xid events ``nvml_events.py``.
"""

from __future__ import annotations

import ctypes
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pynvml
import structlog

from agent.core import backoff
from agent.sources import SourceAbsent
from agent.sources.gpu import clock_events
from agent.sources.gpu.binding import (
    Outputs,
    binding,
    error_text,
    field_results,
    function,
    handle_address,
    load_library,
)
from agent.sources.gpu.nvml_gpm import GpmSampler
from agent.sources.gpu.part import NvlinkCounter
from agent.sources.gpu.readings import UtilizationBuffer

log = structlog.get_logger("nvml")

ALL_LINKS = 0xFFFFFFFF  # scopeId of NVLink field values: every link together
# the NVLink error counters' field ids, each the total over the GPU's links
NVLINK_ERROR_FIELDS = (
    (NvlinkCounter.CRC_FLIT, pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL),
    (NvlinkCounter.CRC_DATA, pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL),
    (NvlinkCounter.REPLAY, pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL),
    (NvlinkCounter.RECOVERY, pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL),
)
POWER_INSTANT = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", 186)  # milliwatts, the instant's
NVLINK_STATE = binding("nvmlDeviceGetNvLinkState")
MAX_NVLINKS = getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 36)

# after these the library as a whole needs shutting down and initialising again
DRIVER_ERRORS = frozenset(
    {
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        pynvml.NVML_ERROR_IRQ_ISSUE,
        pynvml.NVML_ERROR_OPERATING_SYSTEM,
        pynvml.NVML_ERROR_MEMORY,
        pynvml.NVML_ERROR_UNKNOWN,
    }
)
# the GPU itself is gone until a reset
LOST_ERRORS = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED})
# this GPU or driver will never answer this call: ask once
SKIP_ERRORS = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    }
)
# no GPU stack on this node at all
ABSENT_ERRORS = frozenset(
    {
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    }
)


def field_request(fields: tuple[tuple[int, int], ...]) -> Any:
    """NVML's array of field values asking for ``fields``, made once and filled by each call: pynvml's
    wrapper builds it anew each tick, through its Python-level __setattr__, a third of the call."""
    values = (pynvml.c_nvmlFieldValue_t * len(fields))()
    for slot, (field_id, scope_id) in zip(values, fields, strict=True):
        slot.fieldId, slot.scopeId = field_id, scope_id
    return values


def nvmlDeviceGetFieldValues(handle: Any, values: Any) -> Any:  # named after the C function it calls
    ret = function("nvmlDeviceGetFieldValues")(handle, ctypes.c_int32(len(values)), ctypes.byref(values))
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    return values


class NvmlDriverError(Exception):
    """NVML as a whole failed; the library must be initialised again."""


class GpuLost(Exception):
    """The GPU fell off the bus (``NVML_ERROR_GPU_IS_LOST``) or needs a reset."""


PROBE_BASE = 1.0  # seconds before a lost GPU is first asked again


@dataclass
class Device:
    index: int
    handle: Any = None
    uuid: str = ""
    model: str = ""
    pci_bus_id: str | None = None
    lost: bool = False
    probe_at: float = 0.0  # monotonic time of the next recovery probe while lost
    probe_failures: int = 0  # recovery probes that failed since it was lost
    fields: tuple[tuple[int, int], ...] = ()  # (fieldId, scopeId) still worth asking
    field_request: tuple[tuple[tuple[int, int], ...], Any] | None = None  # those fields, as NVML's array
    gpm: GpmSampler | None = None
    utilization: UtilizationBuffer | None = None  # the driver's sample buffer, where it keeps one
    out: Outputs = field(default_factory=Outputs)  # the tick's direct reads' outputs (tick_reads.py)
    energy: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=64))  # (mJ, monotonic)
    clock_events: clock_events.Counted | None = None  # the clocks event counters' last read
    skipped: set[str] = field(default_factory=set)  # functions this GPU cannot answer
    slow: tuple[Any, ...] | None = None  # the collector's reads of values that rarely change
    slow_at: float = 0.0  # monotonic time they are read again (0: at the next tick)
    nvlinks: int | None = None  # NVLink links answering NVML (None: no NVLink, or not probed yet)
    nvlinks_probed: bool = False
    links: tuple[int | None, int | None] = (None, None)  # the last read of (links active, present)
    links_at: float = 0.0  # monotonic time the links' states are read again


@dataclass
class Nvml:
    """One initialisation of the library: start(), read() as often as needed, stop()."""

    library: str = ""
    devices: list[Device] = field(default_factory=list)
    driver_version: str | None = None
    nvml_version: str | None = None
    started: bool = False

    def __post_init__(self) -> None:
        self._missing: set[str] = set()  # functions this driver lacks, for every GPU
        self._noted: set[tuple[int, str, int]] = set()
        self._by_handle: dict[int, int] = {}

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Initialise and enumerate. Raises SourceAbsent (no library, no driver, no GPU) or
        NvmlDriverError."""
        load_library(self.library)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            if e.value in ABSENT_ERRORS:
                raise SourceAbsent(f"NVML cannot start: {error_text(e)}") from None
            raise NvmlDriverError(f"nvmlInit: {error_text(e)}") from None
        self.started = True
        try:
            self.driver_version = self._system(pynvml.nvmlSystemGetDriverVersion)
            self.nvml_version = self._system(pynvml.nvmlSystemGetNVMLVersion)
            count = pynvml.nvmlDeviceGetCount()
            if count == 0:
                raise SourceAbsent("NVML sees no GPU")
            self.devices = [self._open(i) for i in range(count)]
        except pynvml.NVMLError as e:
            self.stop()
            raise NvmlDriverError(f"enumerating GPUs: {error_text(e)}") from None
        except (SourceAbsent, NvmlDriverError):
            self.stop()
            raise

    def stop(self) -> None:
        for dev in self.devices:
            if dev.gpm is not None:
                dev.gpm.free()
                dev.gpm = None
        if self.started:
            self.started = False
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as e:
                log.debug("nvmlShutdown failed", error=error_text(e))

    def _system(self, fn: Callable[[], str]) -> str | None:
        try:
            return fn()
        except pynvml.NVMLError as e:
            if e.value in DRIVER_ERRORS:
                raise
            return None

    def _open(self, index: int) -> Device:
        dev = Device(index)
        try:
            dev.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as e:
            if e.value in LOST_ERRORS:
                self.mark_lost(dev, error_text(e))
                return dev
            raise
        self._by_handle[handle_address(dev.handle)] = index
        try:
            self._identify(dev)
        except GpuLost as e:
            self.mark_lost(dev, str(e))
            return dev
        dev.fields = (
            (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0),
            (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS),
            (POWER_INSTANT, 0),
            # the NVLink error counters as totals over the links: four fields in the call made
            # anyway, where per link (nvmlDeviceGetNvLinkErrorCounter) they would be 4 calls a link,
            # 72 more a tick on an 18-link H100. A GPU without NVLink answers NotSupported once.
            *((fid, 0) for _, fid in NVLINK_ERROR_FIELDS),
            *((fid, 0) for _, fid in clock_events.FIELDS),  # time under each clocks event reason
        )
        dev.gpm = GpmSampler.open(self, dev)
        dev.utilization = UtilizationBuffer.open(self, dev)
        return dev

    def _identify(self, dev: Device) -> None:
        dev.model = self.read(dev, pynvml.nvmlDeviceGetName) or ""
        dev.uuid = self.read(dev, pynvml.nvmlDeviceGetUUID) or ""
        pci = self.read(dev, binding("nvmlDeviceGetPciInfo_v3"))
        if pci is not None:
            bus_id = pci.busId
            dev.pci_bus_id = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)

    # --- reads ------------------------------------------------------------------------------------

    def read(
        self, dev: Device, fn: Callable[..., Any], *args: Any, name: str | None = None, **kw: Any
    ) -> Any:
        """``fn(handle, *args)``, or None where this GPU or driver cannot answer it."""
        name = name or fn.__name__
        if not self.asks(dev, name):
            return None
        try:
            return fn(dev.handle, *args, **kw)
        except pynvml.NVMLError as e:
            return self.failed(dev, name, e)

    def asks(self, dev: Device, name: str) -> bool:
        """Whether ``name`` is still asked of this GPU (not skipped as unsupported or missing)."""
        return name not in dev.skipped and name not in self._missing

    def skip(self, dev: Device | None, name: str, reason: str) -> None:
        skipped = self._missing if dev is None else dev.skipped
        if name in skipped:
            return
        skipped.add(name)
        if dev is None:
            log.info("NVML function missing from this driver; not asking again", function=name, reason=reason)
        else:
            log.info(
                "NVML function not supported on this GPU; not asking again",
                gpu=dev.index,
                uuid=dev.uuid,
                function=name,
                reason=reason,
            )

    def failed(self, dev: Device, name: str, e: pynvml.NVMLError) -> None:
        """What a failed call means: GpuLost or NvmlDriverError raised, a skip noted, or a warning once."""
        code = e.value
        if code in LOST_ERRORS:
            raise GpuLost(f"{name}: {error_text(e)}")
        if code in DRIVER_ERRORS:
            raise NvmlDriverError(f"{name}: {error_text(e)}")
        if code in SKIP_ERRORS:
            self.skip(None if code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND else dev, name, error_text(e))
            return None
        # anything else (Timeout, No data, Insufficient size ...) may pass: no value this tick
        if (dev.index, name, code) not in self._noted:
            self._noted.add((dev.index, name, code))
            log.warning(
                "NVML call failed; no value this tick", gpu=dev.index, function=name, error=error_text(e)
            )
        return None

    def field_values(self, dev: Device) -> dict[int, int]:
        """The device's cumulative counters by field id, in one call. A field the GPU does not support
        (no NVLink on a PCIe card) is dropped from later calls."""
        if not dev.fields:
            return {}
        if dev.field_request is None or dev.field_request[0] is not dev.fields:
            dev.field_request = (dev.fields, field_request(dev.fields))
        values = self.read(dev, nvmlDeviceGetFieldValues, dev.field_request[1])
        if values is None:
            return {}
        results = field_results(values)
        if all(ret == pynvml.NVML_SUCCESS for ret, _ in results):  # every tick but the first, mostly
            return {asked[0]: value for asked, (_, value) in zip(dev.fields, results, strict=True)}
        out: dict[int, int] = {}
        keep: list[tuple[int, int]] = []
        for asked, (ret, value) in zip(dev.fields, results, strict=True):
            if ret == pynvml.NVML_SUCCESS:
                out[asked[0]] = value
                keep.append(asked)
            elif ret in SKIP_ERRORS:
                self.skip(dev, f"field {asked[0]}", error_text(pynvml.NVMLError(ret)))
            elif ret in LOST_ERRORS:
                raise GpuLost(f"field {asked[0]}: {error_text(pynvml.NVMLError(ret))}")
            else:
                keep.append(asked)
        if len(keep) != len(dev.fields):  # the same tuple otherwise: its request array is kept
            dev.fields = tuple(keep)
        return out

    def gpm_metrics(self, dev: Device, metric_ids: Iterable[int]) -> dict[int, float]:
        """GPM metrics in percent between this tick's sample and the previous one ({} on the first,
        and on a GPU without GPM)."""
        return dev.gpm.metrics(self, dev, metric_ids) if dev.gpm is not None else {}

    def nvlink_active(self, dev: Device) -> tuple[int | None, int | None]:
        """(links active, links present). The links are counted once per GPU (links 0, 1 ... up to the
        first that does not answer: NVML has no call for the count); then each present link is read,
        and one that stops answering counts as down."""
        if not dev.nvlinks_probed:
            dev.nvlinks = self._count_nvlinks(dev)
            dev.nvlinks_probed = True
        if not dev.nvlinks:
            return None, None
        active = 0
        for link in range(dev.nvlinks):
            state = self.read(dev, NVLINK_STATE, link, name=f"nvmlDeviceGetNvLinkState link {link}")
            active += bool(state)
        return active, dev.nvlinks

    def _count_nvlinks(self, dev: Device) -> int | None:
        if "nvmlDeviceGetNvLinkState" in self._missing:
            return None
        for link in range(MAX_NVLINKS):
            try:
                NVLINK_STATE(dev.handle, link)
            except pynvml.NVMLError as e:
                if e.value in LOST_ERRORS or e.value in DRIVER_ERRORS:
                    self.failed(dev, "nvmlDeviceGetNvLinkState", e)
                if link == 0 and e.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    self.skip(None, "nvmlDeviceGetNvLinkState", error_text(e))
                return link or None
        return MAX_NVLINKS

    # --- lost GPUs --------------------------------------------------------------------------------

    def mark_lost(self, dev: Device, reason: str) -> None:
        if not dev.lost:
            log.error("GPU lost", gpu=dev.index, uuid=dev.uuid, model=dev.model, reason=reason)
        dev.lost = True

    def probe(self, dev: Device, now: float, backoff_max: float) -> bool:
        """Whether a lost GPU answers again (asked with backoff)."""
        if now < dev.probe_at:
            return False
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(dev.index)
            pynvml.nvmlDeviceGetUUID(handle)
        except pynvml.NVMLError as e:
            if e.value in DRIVER_ERRORS:
                raise NvmlDriverError(f"probing GPU {dev.index}: {error_text(e)}") from None
            dev.probe_failures += 1
            dev.probe_at = now + backoff.delay(dev.probe_failures, PROBE_BASE, backoff_max)
            return False
        dev.handle = handle
        self._by_handle[handle_address(handle)] = dev.index
        dev.lost = False
        dev.probe_failures = 0
        if not dev.uuid:
            self._identify(dev)
        log.warning("GPU answers again", gpu=dev.index, uuid=dev.uuid)
        return True

    def index_of(self, handle: Any) -> int | None:
        return self._by_handle.get(handle_address(handle))
