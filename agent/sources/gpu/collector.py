"""GPUs through NVML: one :class:`GpuStats` per GPU each tick; Xid errors counted as they arrive.

No library, no driver or no GPU makes the collector absent (asked again with backoff, in case the
driver is installed later). A driver error shuts NVML down and initialises it again with backoff.
"""

from __future__ import annotations

import threading
import time

import pynvml
import structlog

from agent.core import backoff
from agent.sources import SourceAbsent
from agent.sources.gpu import clock_events, tick_reads
from agent.sources.gpu.calls import Opening
from agent.sources.gpu.gpm_windows import WindowClock
from agent.sources.gpu.nvml import (
    NVLINK_ERROR_FIELDS,
    POWER_INSTANT,
    PROBE_BASE,
    Device,
    GpuLost,
    Nvml,
    NvmlDriverError,
)
from agent.sources.gpu.nvml_events import XidWatcher
from agent.sources.gpu.nvml_gpm import GpmSampler
from agent.sources.gpu.part import ActivityWindow, GpuPart, GpuStats
from agent.sources.gpu.part import GpuReadingSource as Src
from agent.sources.gpu.readings import power_mean, span, time_share, utilization
from agent.sources.gpu.slow import slow_reads

log = structlog.get_logger("gpu")

# NVML's metric ids (stable across releases; an older nvidia-ml-py may not name them)
GPM_SM_ACTIVE = getattr(pynvml, "NVML_GPM_METRIC_SM_UTIL", 2)  # share of SMs busy: DCGM's SM_ACTIVE
GPM_TENSOR_ACTIVE = getattr(pynvml, "NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5)
GPM_DRAM_ACTIVE = getattr(pynvml, "NVML_GPM_METRIC_DRAM_BW_UTIL", 10)
GPM_BUSY = getattr(pynvml, "NVML_GPM_METRIC_GRAPHICS_UTIL", 1)  # share of time a kernel ran
GPM_METRICS = (GPM_SM_ACTIVE, GPM_TENSOR_ACTIVE, GPM_DRAM_ACTIVE, GPM_BUSY)


class Superseded(Exception):
    """A call that a newer one joined, stopped at its next GPU (the sampler drops its outcome)."""


class GpuCollector:
    name = "gpu"
    part = "gpu"

    def __init__(
        self,
        library: str = "",
        reinit_backoff_max: float = 60.0,
        xid_events: bool = True,
        call_timeout: float = 2.0,
    ) -> None:
        self._library = library
        # a call running this long is joined by the sampler: a GPU one call has been inside for
        # call_timeout is then unresponsive to the other
        self.join_after = call_timeout
        self._call_timeout = call_timeout
        self._calls = 0  # calls started: one that a newer call joined stops
        # GPU index -> held by the call inside its reads, and since when; by index, kept across
        # re-inits, so that a GPU whose call hangs holds one thread however often NVML is reopened
        self._reading: dict[int, threading.Lock] = {}
        self._since: dict[int, float] = {}
        self._gate = threading.Lock()
        self._opening: Opening | None = None  # NVML being initialised on a thread of its own
        self._backoff_max = reinit_backoff_max
        self._xid_events = xid_events
        self._nvml: Nvml | None = None
        self._watcher: XidWatcher | None = None
        self._retry = backoff.Backoff(min(1.0, reinit_backoff_max), reinit_backoff_max)
        self._retry_at = 0.0
        self._last_failure: Exception | None = None
        self._had_gpus = 0
        self._xid_lock = threading.Lock()
        # GPU index -> xid -> count, kept across re-inits; by index because a GPU lost since start has
        # no UUID until it answers again, and NVML's order is fixed for a boot
        self._xids: dict[int, dict[int, int]] = {}
        self._windows = WindowClock()  # GPM windows between ticks (gpm_windows.py)
        self._ticked_at: float | None = None

    # --- the Collector interface -------------------------------------------------------------------

    def collect(self) -> GpuPart:
        """The GPUs read in order on the calling thread. A GPU another call is inside (one this call
        joined: the sampler joins a call that has run ``join_after``) is waited for what is left of
        ``call_timeout`` and then shown unresponsive; a call that was joined stops at its next GPU."""
        nvml = self._started()
        self._calls += 1
        call = self._calls
        now = time.monotonic()
        gpus, read = [], []
        for dev in nvml.devices:
            stats = self._one(nvml, dev, now)
            if self._calls != call:
                raise Superseded("a newer call read the GPUs meanwhile")
            if stats is None:
                gpus.append(self._down(dev, unresponsive=time.monotonic() - self._since[dev.index]))
                continue
            gpus.append(stats)
            read.append(dev)
        if self._ticked_at is not None:
            self._windows.ticked(now, now - self._ticked_at, nvml, read)
        self._ticked_at = now
        return GpuPart(driver_version=nvml.driver_version, nvml_version=nvml.nvml_version, gpus=tuple(gpus))

    def _one(self, nvml: Nvml, dev: Device, now: float) -> GpuStats | None:
        """``dev`` read on this thread, or None where another call has been inside one of its reads
        for ``call_timeout``."""
        index = dev.index
        with self._gate:  # taking a GPU and stamping when, as one step for a call that looks at it
            lock = self._reading.setdefault(index, threading.Lock())
            mine = lock.acquire(blocking=False)
            if mine:
                self._since[index] = time.monotonic()
            else:
                left = self._call_timeout - (time.monotonic() - self._since[index])
        if not mine:
            if left <= 0 or not lock.acquire(timeout=left):
                return None
            with self._gate:
                self._since[index] = time.monotonic()
        try:
            return self._read(nvml, dev, now)
        except NvmlDriverError as e:
            if nvml is not self._nvml:  # a call that hung through a re-init: not the session now open
                raise Superseded(f"NVML was shut down while this call hung ({e})") from None
            self._fail(e, now)
            raise
        finally:
            lock.release()

    def close(self) -> None:
        self._shutdown()
        self._windows.close()

    # --- initialisation with backoff ---------------------------------------------------------------

    def _started(self) -> Nvml:
        if self._nvml is not None:
            return self._nvml
        now = time.monotonic()
        if self._opening is None:
            if self._last_failure is not None and now < self._retry_at:
                raise type(self._last_failure)(str(self._last_failure))
            self._opening = Opening(self._open)
            self._opening.done.wait(self._call_timeout)
        opening = self._opening
        if not opening.done.is_set():  # left to its thread; no second one while it runs
            # the same words every tick (the sampler logs an error when its words change)
            raise NvmlDriverError(
                f"NVML initialisation has not returned since {opening.started:%H:%M:%S} UTC"
                " (slow without persistence mode; if it lasts, the driver is wedged)"
            )
        self._opening = None
        try:
            nvml, watcher = opening.outcome()
        except SourceAbsent as e:
            if self._had_gpus:  # the driver went away under us: a failure to alert on, not "no GPUs here"
                err = NvmlDriverError(f"{e}; this node had {self._had_gpus} GPUs")
                self._schedule_retry(err, now)
                raise err from None
            self._schedule_retry(e, now)
            raise
        except NvmlDriverError as e:
            self._fail(e, now)
            raise
        if self._last_failure is not None:
            log.info("NVML initialised again", gpus=len(nvml.devices), after=str(self._last_failure))
        else:
            log.info("NVML initialised", gpus=len(nvml.devices), driver=nvml.driver_version)
        self._nvml, self._watcher = nvml, watcher
        self._had_gpus = len(nvml.devices)
        self._last_failure = None
        self._retry.reset()
        return nvml

    def _open(self) -> tuple[Nvml, XidWatcher | None]:
        """On the opening's thread: NVML started, its GPUs enumerated, their Xid events registered."""
        nvml = Nvml(self._library)
        nvml.start()  # stops NVML again itself when it raises
        try:
            return nvml, self._watch(nvml)
        except NvmlDriverError:
            nvml.stop()
            raise
        except pynvml.NVMLError as e:
            nvml.stop()
            raise NvmlDriverError(f"registering events: {e}") from None

    def _watch(self, nvml: Nvml) -> XidWatcher | None:
        if not self._xid_events:
            return None
        watcher = XidWatcher(nvml, self._count_xid, self._backoff_max)
        return watcher if watcher.start() else None

    def _rewatch(self, nvml: Nvml, dev: Device) -> None:
        """A GPU that was lost when the event set was made is not in it: make a new one."""
        if not self._xid_events or (self._watcher is not None and dev.index in self._watcher.watching):
            return
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        try:
            self._watcher = self._watch(nvml)
        except pynvml.NVMLError as e:
            raise NvmlDriverError(f"registering events: {e}") from None

    def _schedule_retry(self, failure: Exception, now: float) -> None:
        self._last_failure = failure
        self._retry_at = now + self._retry.next()

    def _fail(self, e: NvmlDriverError, now: float) -> None:
        self._shutdown()
        self._schedule_retry(e, now)
        log.warning(
            "NVML driver error; initialising again with backoff",
            error=str(e),
            retry_in=round(self._retry_at - now, 2),
        )

    def _shutdown(self) -> None:
        watcher, nvml = self._watcher, self._nvml
        self._watcher = self._nvml = None
        self._windows.pause()
        self._ticked_at = None
        if watcher is not None:
            watcher.stop()
        if nvml is not None:
            nvml.stop()

    # --- Xid errors (called on the watcher thread) ---------------------------------------------------

    def _count_xid(self, dev: Device, xid: int) -> None:
        # ECC, remapping and NVLink links may have moved with it (before the count shows)
        dev.slow_at = dev.links_at = 0.0
        with self._xid_lock:
            counts = self._xids.setdefault(dev.index, {})
            counts[xid] = counts.get(xid, 0) + 1
        log.warning("GPU Xid error", gpu=dev.index, uuid=dev.uuid, xid=xid)

    def _xid_counts(self, dev: Device) -> dict[int, int]:
        with self._xid_lock:
            return dict(self._xids.get(dev.index, {}))

    # --- one GPU ----------------------------------------------------------------------------------

    def _read(self, nvml: Nvml, dev: Device, now: float) -> GpuStats:
        if dev.lost:
            if not nvml.probe(dev, now, self._backoff_max):
                return self._down(dev)
            self._rewatch(nvml, dev)
            dev.slow_at = dev.links_at = 0.0
        try:
            return self._stats(nvml, dev, now)
        except GpuLost as e:
            nvml.mark_lost(dev, str(e))
            dev.probe_at = now + backoff.delay(1, PROBE_BASE, self._backoff_max)
            return self._down(dev)

    def _down(self, dev: Device, unresponsive: float | None = None) -> GpuStats:
        """A GPU without figures: lost, or (``unresponsive`` seconds) inside a call that hangs."""
        return GpuStats(
            index=dev.index,
            uuid=dev.uuid,
            model=dev.model,
            up=False,
            pci_bus_id=dev.pci_bus_id,
            xid_counts=self._xid_counts(dev),
            unresponsive_seconds=round(unresponsive, 3) if unresponsive is not None else None,
        )

    def _stats(self, nvml: Nvml, dev: Device, now: float) -> GpuStats:
        rates = tick_reads.rates(nvml, dev)  # memory's, and the fallback
        mem = tick_reads.memory(nvml, dev)
        gpm = nvml.gpm_metrics(dev, GPM_METRICS)
        windows = _activity(dev.gpm, gpm)
        util, samples, util_source = utilization(nvml, dev, rates, gpm.get(GPM_BUSY))
        # power over the stretch the utilization figure covers: a driver period (1/6 s to 1 s) can be
        # longer than a tick, and power above idle is the real work utilization is weighed against
        mj = tick_reads.ulonglong(nvml, dev, tick_reads.ENERGY)
        power, power_source = power_mean(dev, mj, time.monotonic(), span(dev, util_source)), Src.ENERGY
        if power is None:
            milliwatts = nvml.read(dev, pynvml.nvmlDeviceGetPowerUsage)
            power = milliwatts / 1000.0 if milliwatts is not None else None
            power_source = Src.AVERAGE if milliwatts is not None else Src.NONE
        slow = slow_reads(nvml, dev, now)
        limit, ecc, remap = slow.power_limit, slow.ecc_uncorrected, slow.remapped_rows
        temp = tick_reads.uint(nvml, dev, tick_reads.TEMPERATURE, pynvml.NVML_TEMPERATURE_GPU)
        sm_clock = tick_reads.uint(nvml, dev, tick_reads.CLOCK, pynvml.NVML_CLOCK_SM)
        bits = tick_reads.ulonglong(nvml, dev, *tick_reads.REASONS)
        fields = nvml.field_values(dev)
        counted_ns = clock_events.counters(fields)
        counted = clock_events.read(counted_ns, time.monotonic())
        prev_counted, dev.clock_events = dev.clock_events, counted
        shares, shares_source = clock_events.shares(prev_counted, counted, bits)
        procs = tick_reads.processes(nvml, dev)
        nvlink_tx = fields.get(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX)
        nvlink_rx = fields.get(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
        instant = fields.get(POWER_INSTANT)
        return GpuStats(
            index=dev.index,
            uuid=dev.uuid,
            model=dev.model,
            up=True,
            utilization=util,
            memory_utilization=rates[1] / 100.0 if rates is not None else None,
            memory_used_bytes=mem[0] if mem is not None else None,
            memory_total_bytes=mem[1] if mem is not None else None,
            power_watts=power,
            power_limit_watts=limit / 1000.0 if limit is not None else None,
            temperature_celsius=float(temp) if temp is not None else None,
            sm_clock_hertz=sm_clock * 1e6 if sm_clock is not None else None,
            clocks_event_reasons=bits,
            pcie_tx_bytes=fields.get(pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES),
            pcie_rx_bytes=fields.get(pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES),
            nvlink_tx_bytes=nvlink_tx * 1024 if nvlink_tx is not None else None,  # the field counts KiB
            nvlink_rx_bytes=nvlink_rx * 1024 if nvlink_rx is not None else None,
            sm_active=_ratio(gpm.get(GPM_SM_ACTIVE)),
            tensor_active=_ratio(gpm.get(GPM_TENSOR_ACTIVE)),
            dram_active=_ratio(gpm.get(GPM_DRAM_ACTIVE)),
            graphics_active=_ratio(gpm.get(GPM_BUSY)),
            ecc_uncorrected_total=int(ecc) if ecc is not None else None,
            ecc_corrected_total=int(slow.ecc_corrected) if slow.ecc_corrected is not None else None,
            row_remap_failure=bool(remap[3]) if remap is not None else None,
            row_remap_pending=bool(remap[2]) if remap is not None else None,
            processes=procs or (),
            xid_counts=self._xid_counts(dev),
            pci_bus_id=dev.pci_bus_id,
            nvlink_errors={c: fields[f] for c, f in NVLINK_ERROR_FIELDS if f in fields},
            clocks_event_ns=counted_ns,
            clocks_event_share=shares,
            clocks_event_source=shares_source,
            utilization_source=util_source,
            utilization_samples=samples,
            power_source=power_source,
            activity_windows=windows,
            power_instant_watts=instant / 1000.0 if instant is not None else None,
            pcie_link_generation=slow.pcie_generation,
            pcie_link_generation_max=slow.pcie_generation_max,
            pcie_link_width=slow.pcie_width,
            pcie_link_width_max=slow.pcie_width_max,
            nvlink_links_active=slow.nvlinks_active,
            nvlink_links=slow.nvlinks,
            power_default_limit_watts=_watts(slow.power_default_limit),
            sm_clock_max_hertz=slow.sm_clock_max_mhz * 1e6 if slow.sm_clock_max_mhz is not None else None,
        )


def _activity(gpm: GpmSampler | None, mean: dict[int, float]) -> tuple[ActivityWindow, ...]:
    """The tick's GPM windows where it was read in more than one (else empty), and whether the next
    tick is read in windows (``gpm_cadence.WindowCadence``)."""
    if gpm is None:
        return ()
    windows: tuple[ActivityWindow, ...] = ()
    if len(gpm.windows) > 1:
        out: list[ActivityWindow] = []
        for seconds, metrics in gpm.windows:
            busy = metrics.get(GPM_BUSY)
            work = metrics.get(GPM_SM_ACTIVE, metrics.get(GPM_TENSOR_ACTIVE))
            if busy is None or work is None:
                out = []
                break
            out.append(ActivityWindow(seconds, time_share(busy), time_share(work)))
        windows = tuple(out)
    busy, work = mean.get(GPM_BUSY), mean.get(GPM_SM_ACTIVE, mean.get(GPM_TENSOR_ACTIVE))
    gpm.windowing = gpm.cadence.next(_ratio(busy), _ratio(work), windows)
    return windows


def _watts(milliwatts: int | None) -> float | None:
    return milliwatts / 1000.0 if milliwatts is not None else None


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else time_share(percent)
