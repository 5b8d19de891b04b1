"""What the driver kept over a tick, not one point of it (issue 32, docs/gpu.md "Reading sources").

A training step is 0.1-2 s, so one reading a second almost always holds a mix of work and wait:
- utilization: the driver's own buffer of samples (``nvmlDeviceGetSamples``), drained each tick and
  time-weighted, instead of ``nvmlDeviceGetUtilizationRates``, which covers only the last sample
  period (1/6 s to 1 s by product);
- power: the energy counter's delta (``nvmlDeviceGetTotalEnergyConsumption``, Volta and later), the
  exact mean over the tick, instead of ``nvmlDeviceGetPowerUsage`` (a 1 s mean on Ampere and later
  except GA100, the instant's on those).

Each returns None where its call cannot say this tick (not supported, the first tick, a counter
that went back); the collector then falls back and names the source it used.
"""

from __future__ import annotations

import ctypes
import time
from typing import TYPE_CHECKING

import pynvml

from agent.sources.gpu.binding import binding, number

if TYPE_CHECKING:
    from agent.sources.gpu.nvml import Device, Nvml

SAMPLES = "nvmlDeviceGetSamples"
ENERGY = binding("nvmlDeviceGetTotalEnergyConsumption")
# NVML samples utilization every 1/6 s to 1 s by product: closer timestamps are one sample again
MIN_PERIOD_US = 20_000
MAX_DEPTH = 4096  # samples kept per call; a driver asking for more is answered with the newest


class UtilizationBuffer:
    """One GPU's drain of the utilization buffer: the newest timestamp seen, the driver's sample
    period (the smallest gap between two samples; an idle stretch records nothing, so a gap may be
    longer), and the buffer the driver fills, sized once."""

    __slots__ = ("_array", "_count", "_type", "drained_at", "fresh_at", "period_us", "seen")

    def __init__(self, depth: int) -> None:
        self.seen = 0
        self.period_us = 0
        self.drained_at = 0.0
        self.fresh_at = 0.0  # monotonic time of the last drain that found a new sample
        self._array = (pynvml.c_nvmlSample_t * depth)()
        self._count = ctypes.c_uint(depth)
        self._type = pynvml._nvmlValueType_t()

    @classmethod
    def open(cls, nvml: Nvml, dev: Device) -> UtilizationBuffer | None:
        """The GPU's buffer, or None where the driver keeps none for it (the collector then reads
        ``nvmlDeviceGetUtilizationRates`` and says so once)."""
        count = ctypes.c_uint(0)
        kind = pynvml._nvmlValueType_t()
        try:
            fn = pynvml._nvmlGetFunctionPointer(SAMPLES)
        except pynvml.NVMLError as e:
            nvml.failed(dev, SAMPLES, e)
            return None
        ret = fn(dev.handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, ctypes.c_ulonglong(0), ctypes.byref(kind),
                 ctypes.byref(count), None)  # fmt: skip
        if ret != pynvml.NVML_SUCCESS:
            nvml.failed(dev, SAMPLES, pynvml.NVMLError(ret))
            return None
        return cls(max(1, min(MAX_DEPTH, count.value)))

    def share(self, nvml: Nvml, dev: Device) -> tuple[float, int] | None:
        """(share of the time since the last drain a kernel ran, samples it came from); (0, 0) when
        the buffer has held nothing new for longer than a sample period, as while the GPU is idle;
        None where it cannot say (this tick came before the next sample: ticks faster than the
        driver's period)."""
        now = time.monotonic()
        fn = pynvml._nvmlGetFunctionPointer(SAMPLES)
        self._count.value = len(self._array)
        ret = fn(dev.handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, ctypes.c_ulonglong(self.seen),
                 ctypes.byref(self._type), ctypes.byref(self._count), self._array)  # fmt: skip
        prev_at, self.drained_at = self.drained_at, now
        if ret == pynvml.NVML_ERROR_NOT_FOUND:
            return self._nothing_new(now)
        if ret != pynvml.NVML_SUCCESS:
            nvml.failed(dev, SAMPLES, pynvml.NVMLError(ret))
            return None
        stamps: list[int] = []
        values: list[int] = []
        last = self.seen
        for s in self._array[: self._count.value]:
            stamp = number(s, "timeStamp")
            if stamp >= last + MIN_PERIOD_US:  # a sample seen already may come back a few µs later
                stamps.append(stamp)
                values.append(number(number(s, "sampleValue"), "uiVal"))
                last = stamp
        if not stamps:
            return self._nothing_new(now)
        self.fresh_at = now
        before = self.seen
        self._learn_period(stamps)
        self.seen = stamps[-1]
        if not (before and prev_at and self.period_us):  # the first drain returns the whole buffer
            return None
        # each sample is the share of its own period a kernel ran, so weighted by that period; over
        # the span from the last sample seen to the newest, which tiles time from tick to tick
        # whatever the drains' own jitter. After an idle stretch (nothing recorded, the ticks
        # reported idle meanwhile) only this tick's own span counts.
        busy = sum(values) / 100.0 * self.period_us / 1e6
        span = (self.seen - before) / 1e6
        elapsed = now - prev_at
        if span > elapsed + self.period_us / 1e6:
            span = elapsed
        return min(1.0, busy / max(span, 1e-3)), len(values)

    def _nothing_new(self, now: float) -> tuple[float, int] | None:
        """Idle once a whole period (and a half, for the driver's jitter) went by with no sample."""
        if self.period_us and now - self.fresh_at < 1.5 * self.period_us / 1e6:
            return None
        return 0.0, 0

    def _learn_period(self, stamps: list[int]) -> None:
        gaps = [b - a for a, b in zip([self.seen, *stamps], stamps, strict=False)]
        if self.seen == 0:
            gaps = gaps[1:]  # no previous sample: the first "gap" is its timestamp
        if gaps:
            low = min(gaps)
            if not self.period_us or low < self.period_us:
                self.period_us = low


def power_mean(nvml: Nvml, dev: Device) -> float | None:
    """Watts over the time since the last read, from the energy counter (millijoules); None on the
    first read, where the GPU has no counter, or when it went back (a driver reload)."""
    mj = nvml.read(dev, ENERGY)
    now = time.monotonic()
    if mj is None:
        return None
    prev, dev.energy = dev.energy, (int(mj), now)
    if prev is None or mj < prev[0] or now - prev[1] < 0.05:
        return None
    return (mj - prev[0]) / (now - prev[1]) / 1000.0
