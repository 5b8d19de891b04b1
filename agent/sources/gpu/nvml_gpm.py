"""GPM (GPU Performance Monitoring, Hopper and later): SM, tensor and DRAM activity between two
samples the driver takes when asked, where utilization would only say "a kernel ran"."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pynvml
import structlog

from agent.sources.gpu.binding import binding, error_text, number

if TYPE_CHECKING:
    from agent.sources.gpu.nvml import Device, Nvml

log = structlog.get_logger("nvml")

GPM_SAMPLE_GET = binding("nvmlGpmSampleGet")
# NVIDIA: two samples "should be greater than 100ms" apart, "due to the internal sample refresh rate":
# a tick closer than that to the last sample keeps the last metrics instead of asking for invalid ones
MIN_INTERVAL = 0.1


@dataclass
class GpmSampler:
    """Two GPM samples per GPU, alternating: a metric is the activity between the last two ticks."""

    samples: list[Any]
    request: Any
    previous: Any = None
    metric_ids: tuple[int, ...] = ()
    slots: list[Any] = field(default_factory=list)  # views of request.metrics[i], read after each call
    sampled_at: float = -math.inf  # monotonic time of the previous sample
    last: dict[int, float] = field(default_factory=dict)  # the metrics between the last two samples

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

    def metrics(self, nvml: Nvml, dev: Device, metric_ids: Iterable[int]) -> dict[int, float]:
        """GPM metrics in percent between this tick's sample and the previous one ({} on the first);
        within MIN_INTERVAL of the previous sample, the last ones again."""
        now = time.monotonic()
        if now - self.sampled_at < MIN_INTERVAL:
            return self.last
        self.last = self._metrics(nvml, dev, metric_ids)
        return self.last

    def _metrics(self, nvml: Nvml, dev: Device, metric_ids: Iterable[int]) -> dict[int, float]:
        current = self.samples[1] if self.previous is self.samples[0] else self.samples[0]
        if nvml.read(dev, GPM_SAMPLE_GET, current) is None:
            return {}
        self.sampled_at = time.monotonic()
        previous, self.previous = self.previous, current
        if previous is None:
            return {}
        ids = tuple(metric_ids)
        req = self.request
        if ids != self.metric_ids:
            req.numMetrics = len(ids)
            metrics = req.metrics
            self.slots = [metrics[i] for i in range(len(ids))]
            for slot, metric in zip(self.slots, ids, strict=True):
                slot.metricId = metric
            self.metric_ids = ids
        req.sample1 = previous
        req.sample2 = current
        if nvml.read(dev, lambda _h: pynvml.nvmlGpmMetricsGet(req), name="nvmlGpmMetricsGet") is None:
            return {}
        return {
            metric: number(slot, "value")
            for metric, slot in zip(ids, self.slots, strict=True)
            if number(slot, "nvmlReturn") == pynvml.NVML_SUCCESS
        }

    def free(self) -> None:
        for s in self.samples:
            try:
                pynvml.nvmlGpmSampleFree(s)
            except pynvml.NVMLError:
                pass
        self.samples = []
