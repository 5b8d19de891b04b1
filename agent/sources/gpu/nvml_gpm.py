"""GPM (GPU Performance Monitoring, Hopper and later): SM, tensor and DRAM activity between two
samples the driver takes when asked, where utilization would only say "a kernel ran".

A tick's activity is read over one or more windows: the collector samples at each tick, and
between ticks ``gpm_windows.WindowClock`` may take more samples on its own thread, so a tick that
mixes work and waiting carries each stretch's activity, not only their mean (issue 32). A window
is the activity between two consecutive samples, whoever took them; the tick takes the windows
that ended since the last one.
"""

from __future__ import annotations

import ctypes
import math
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pynvml
import structlog

from agent.sources.gpu.binding import binding, error_text, function
from agent.sources.gpu.gpm_cadence import WindowCadence

if TYPE_CHECKING:
    from agent.sources.gpu.nvml import Device, Nvml

log = structlog.get_logger("nvml")

SAMPLE_GET, METRICS_GET = "nvmlGpmSampleGet", "nvmlGpmMetricsGet"
# NVIDIA: two samples "should be greater than 100ms" apart, "due to the internal sample refresh rate":
# a tick closer than that to the last sample keeps the last metrics instead of asking for invalid ones
MIN_INTERVAL = 0.1
FREE_WAIT = 2.0  # seconds free() waits for a window being read; past it the samples are left allocated
# one nvmlGpmMetric_t of the request's array: metricId, nvmlReturn, value, then metricInfo's three
# pointers; read from the array's bytes in one pass, where ctypes would go field by field (a window
# is three of these a second per GPU)
_METRIC = struct.Struct("=IId24x")
_METRICS_AT = 24  # offsetof(nvmlGpmMetricsGet_t, metrics)
if pynvml.c_nvmlGpmMetric_t.metricId.offset != 0 or ctypes.sizeof(pynvml.c_nvmlGpmMetric_t) != _METRIC.size:
    raise ImportError("nvmlGpmMetric_t is not laid out as nvml.h has it")
if pynvml.c_nvmlGpmMetricsGet_t.metrics.offset != _METRICS_AT:
    raise ImportError("nvmlGpmMetricsGet_t is not laid out as nvml.h has it")

Metrics = dict[int, float]


@dataclass
class GpmSampler:
    """Two GPM samples per GPU, alternating: a window is the activity between the last two."""

    samples: list[Any]
    request: Any
    previous: Any = None
    metric_ids: tuple[int, ...] = ()
    sampled_at: float = -math.inf  # monotonic time of the previous sample
    last: Metrics = field(default_factory=dict)  # the metrics over the last tick's windows
    # (seconds, metrics) of each window that ended since the last tick, and of the last tick's
    pending: list[tuple[float, Metrics]] = field(default_factory=list)
    windows: tuple[tuple[float, Metrics], ...] = ()
    windowing: bool = False  # the window clock reads this GPU between ticks (``cadence`` decides)
    cadence: WindowCadence = field(default_factory=WindowCadence)
    # the window clock and the tick's reader both sample: one at a time
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(cls, nvml: Nvml, dev: Device) -> GpmSampler | None:
        """The GPU's sampler, or None where it has no GPM (before Hopper) or samples cannot be had."""
        support = nvml.read(dev, binding("nvmlGpmQueryDeviceSupport"))
        if support is None or not support.isSupportedDevice:
            return None
        try:
            samples = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
        except pynvml.NVMLError as e:
            log.warning(
                "cannot allocate GPM samples; no SM/tensor activity", gpu=dev.index, error=error_text(e)
            )
            return None
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        return cls(samples, request)

    def metrics(self, nvml: Nvml, dev: Device, metric_ids: Iterable[int]) -> Metrics:
        """The tick's GPM metrics in percent: time-weighted over the windows that ended since the
        last tick, this tick's own sample closing the last one ({} on the first tick). Within
        MIN_INTERVAL of the last sample, the tick takes none: the last metrics again where no window
        ended meanwhile."""
        with self.lock:
            if time.monotonic() - self.sampled_at >= MIN_INTERVAL:
                self._sample(nvml, dev, tuple(metric_ids))
            ended, self.pending = self.pending, []
            self.windows = tuple(ended)
            if ended:
                self.last = ended[0][1] if len(ended) == 1 else _mean(ended)
            return self.last

    def window(self, nvml: Nvml, dev: Device) -> None:
        """On the window clock's thread: close a window here, unless the tick is reading the GPU,
        this GPU is not being read in windows, or its last sample is too recent."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            due = time.monotonic() - self.sampled_at >= MIN_INTERVAL
            if self.samples and self.windowing and self.metric_ids and due:
                self._sample(nvml, dev, self.metric_ids)
        finally:
            self.lock.release()

    def _sample(self, nvml: Nvml, dev: Device, ids: tuple[int, ...]) -> None:
        """A new sample; the window since the previous one onto ``pending`` where its metrics came.
        The two calls go straight to the library (pynvml's wrappers look each function up under a
        lock every call); a failure goes through ``nvml.failed`` as any read's does."""
        if not (nvml.asks(dev, SAMPLE_GET) and nvml.asks(dev, METRICS_GET)):
            return
        try:
            sample_get, metrics_get = function(SAMPLE_GET), function(METRICS_GET)
        except pynvml.NVMLError as e:
            nvml.failed(dev, SAMPLE_GET, e)
            return
        current = self.samples[1] if self.previous is self.samples[0] else self.samples[0]
        ret = sample_get(dev.handle, current)
        if ret != pynvml.NVML_SUCCESS:
            nvml.failed(dev, SAMPLE_GET, pynvml.NVMLError(ret))
            return
        now = time.monotonic()
        seconds, self.sampled_at = now - self.sampled_at, now
        previous, self.previous = self.previous, current
        if previous is None:
            return
        req = self.request
        if ids != self.metric_ids:
            req.numMetrics = len(ids)
            for i, metric in enumerate(ids):
                req.metrics[i].metricId = metric
            self.metric_ids = ids
        req.sample1 = previous
        req.sample2 = current
        ret = metrics_get(ctypes.byref(req))
        if ret != pynvml.NVML_SUCCESS:
            nvml.failed(dev, METRICS_GET, pynvml.NVMLError(ret))
            return
        rows = ctypes.string_at(ctypes.addressof(req) + _METRICS_AT, _METRIC.size * len(ids))
        got = {metric: value for metric, ok, value in _METRIC.iter_unpack(rows) if ok == pynvml.NVML_SUCCESS}
        if got:
            self.pending.append((seconds, got))

    def free(self) -> None:
        """The samples back to NVML, once no window is being read (a window whose call hangs past
        FREE_WAIT keeps them: freeing memory a call still uses is worse than leaking two samples)."""
        if not self.lock.acquire(timeout=FREE_WAIT):
            log.warning("a GPM window's call has not returned; its samples are not freed")
            self.samples = []
            return
        try:
            for s in self.samples:
                try:
                    pynvml.nvmlGpmSampleFree(s)
                except pynvml.NVMLError:
                    pass
            self.samples = []
        finally:
            self.lock.release()


def _mean(windows: list[tuple[float, Metrics]]) -> Metrics:
    """Each metric time-weighted over the windows that have it: GPM's metrics are means over their
    window, so this is the metric between the first window's start and the last one's end."""
    sums: dict[int, float] = {}
    spans: dict[int, float] = {}
    for seconds, metrics in windows:
        for metric, value in metrics.items():
            sums[metric] = sums.get(metric, 0.0) + value * seconds
            spans[metric] = spans.get(metric, 0.0) + seconds
    return {metric: sums[metric] / spans[metric] for metric in sums if spans[metric] > 0}
