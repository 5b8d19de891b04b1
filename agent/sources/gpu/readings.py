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
import struct
import time
from typing import TYPE_CHECKING

import pynvml
import structlog

from agent.sources.gpu.binding import function, number
from agent.sources.gpu.part import GpuReadingSource as Src

if TYPE_CHECKING:
    from agent.sources.gpu.nvml import Device, Nvml

log = structlog.get_logger("nvml")

SAMPLES = "nvmlDeviceGetSamples"
# NVML samples utilization every 1/6 s to 1 s by product: closer timestamps are one sample again
MIN_PERIOD_US = 20_000
MAX_DEPTH = 4096  # samples kept per call; a driver asking for more is answered with the newest
# one nvmlSample_t: timeStamp, then the value union, whose uiVal (utilization's type) is its first 4
# bytes, as every member starts at the union's start; read from the array's bytes in one pass, where
# ctypes makes an object per sample and per field
_SAMPLE = struct.Struct("=QI4x")
if ctypes.sizeof(pynvml.c_nvmlSample_t) != _SAMPLE.size or pynvml.c_nvmlSample_t.sampleValue.offset != 8:
    raise ImportError("nvmlSample_t is not laid out as nvml.h has it")


class UtilizationBuffer:
    """One GPU's drain of the utilization buffer: the newest timestamp seen, the driver's sample
    period (the smallest gap between two samples; an idle stretch records nothing, so a gap may be
    longer), and the buffer the driver fills, sized once.

    The timestamps' clock is not ours to know (µs since 1970 by the header, boot time by one
    exporter's experience): only their differences are used, and a clock that steps back (a wall
    clock set back by NTP) is found by the buffer's newest sample lying before one already seen."""

    __slots__ = (
        "_array",
        "_count",
        "_type",
        "checked_at",
        "drained_at",
        "fresh_at",
        "period_us",
        "rewound",
        "seen",
        "span",
    )

    def __init__(self, depth: int) -> None:
        self.seen = 0
        self.period_us = 0
        self.drained_at = 0.0
        self.fresh_at = 0.0  # monotonic time of the last drain that found a new sample
        self.checked_at = 0.0  # monotonic time the buffer was last read whole, to look for a step back
        self.rewound = 0  # times the timestamps were found to have gone back
        self.span = 0.0  # seconds the last share covered
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
            fn = function(SAMPLES)
        except pynvml.NVMLError as e:
            nvml.failed(dev, SAMPLES, e)
            return None
        ret = fn(dev.handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, ctypes.c_ulonglong(0), ctypes.byref(kind),
                 ctypes.byref(count), None)  # fmt: skip
        if ret != pynvml.NVML_SUCCESS:
            nvml.failed(dev, SAMPLES, pynvml.NVMLError(ret))
            return None
        return cls(max(1, min(MAX_DEPTH, count.value)))

    def share(self, nvml: Nvml, dev: Device, kernel_ran: bool = False) -> tuple[float, int] | None:
        """(share of the time since the last drain a kernel ran, samples it came from); (0, 0) when
        the buffer has held nothing new for longer than a sample period, as while the GPU is idle;
        None where it cannot say (this tick came before the next sample: ticks faster than the
        driver's period; the timestamps went back). ``kernel_ran``: the driver's last sample period
        says a kernel ran, so a buffer with nothing new may be one whose clock went back."""
        now = time.monotonic()
        ret = self._drain(dev, self.seen)
        prev_at, self.drained_at = self.drained_at, now
        if ret == pynvml.NVML_ERROR_NOT_FOUND:
            nothing = self._nothing_new(now)
            if nothing is not None and kernel_ran and self.seen and self._went_back(dev, now):
                # rare (a clock set back), and each one is worth a line
                log.warning(
                    "the utilization buffer's timestamps went back; read on from its newest sample",
                    gpu=dev.index,
                    times=self.rewound,
                )
                return None
            return nothing
        if ret != pynvml.NVML_SUCCESS:
            nvml.failed(dev, SAMPLES, pynvml.NVMLError(ret))
            return None
        stamps: list[int] = []
        values: list[int] = []
        last = self.seen
        rows = memoryview(self._array).cast("B")[: self._count.value * _SAMPLE.size]
        for stamp, value in _SAMPLE.iter_unpack(rows):
            if stamp >= last + MIN_PERIOD_US:  # a sample seen already may come back a few µs later
                stamps.append(stamp)
                values.append(value)
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
        self.span = span
        return min(1.0, busy / max(span, 1e-3)), len(values)

    def _drain(self, dev: Device, after: int) -> int:
        fn = function(SAMPLES)
        self._count.value = len(self._array)
        ret = fn(dev.handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, ctypes.c_ulonglong(after),
                 ctypes.byref(self._type), ctypes.byref(self._count), self._array)  # fmt: skip
        return int(ret)

    def _went_back(self, dev: Device, now: float) -> bool:
        """Whether the buffer's newest sample lies before the last one seen (then drained from it
        on); the whole buffer is read at most once a second, and only while the buffer holds nothing
        new though the driver says a kernel ran."""
        if now - self.checked_at < max(1.0, 1.5 * self.period_us / 1e6):
            return False
        self.checked_at = now
        if self._drain(dev, 0) != pynvml.NVML_SUCCESS or not self._count.value:
            return False
        newest = number(self._array[self._count.value - 1], "timeStamp")
        if newest + self.period_us >= self.seen:
            return False  # the kernel began after the last sample: the next one will show it
        self.seen, self.fresh_at = newest, now
        self.rewound += 1
        return True

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


def power_mean(dev: Device, mj: int | None, now: float, span: float = 0.0) -> float | None:
    """Watts from the energy counter (millijoules) over the time since the last read, or over the
    last ``span`` seconds where that is longer (as far as the reads kept go back): the span of the
    tick's utilization figure, so that power and utilization describe the same stretch of time.
    None on the first read, where the GPU has no counter, or when it went back (a driver reload).
    ``now``: the monotonic time read right after the counter, before anything else can delay it."""
    if mj is None:
        return None
    history = dev.energy
    if history and mj < history[-1][0]:
        history.clear()
    history.append((int(mj), now))
    while len(history) > 2 and history[1][1] <= now - span:
        history.popleft()  # keep the newest read at or before the span's start, and those after it
    if len(history) < 2:
        return None
    base = history[-2]  # the previous read
    if span > now - base[1]:
        base = history[0]
    if now - base[1] < 0.05:
        return None
    return (mj - base[0]) / (now - base[1]) / 1000.0


def utilization(
    nvml: Nvml, dev: Device, rates: tuple[int, int] | None, gpm_busy: float | None
) -> tuple[float | None, int | None, Src]:
    """The share of the tick a kernel ran, the buffer samples it came from, and its source: the
    driver's buffer, else the last sample period's rate, else GPM's graphics activity (MIG, where
    the parent GPU answers no utilization)."""
    kernel_ran = rates is not None and rates[0] > 0
    buffer = dev.utilization.share(nvml, dev, kernel_ran) if dev.utilization is not None else None
    if buffer is not None:
        share, count = buffer
        return share, count, Src.SAMPLES if count else Src.SAMPLES_IDLE
    if rates is not None:
        return rates[0] / 100.0, None, Src.RATES
    if gpm_busy is not None:
        return time_share(gpm_busy), None, Src.GPM
    return None, None, Src.NONE


def time_share(percent: float) -> float:
    """A percent of time as a share of it, held to 0..1 (a mean over windows may round past 100)."""
    return max(0.0, min(1.0, percent / 100.0))


def span(dev: Device, source: Src) -> float:
    """Seconds the tick's utilization figure covers beyond the tick itself (0: the tick): the
    buffer's drained samples, or the driver's period for the last-period rate."""
    buffer = dev.utilization
    if buffer is None:
        return 0.0
    if source is Src.SAMPLES:
        return buffer.span
    if source is Src.RATES:
        return buffer.period_us / 1e6
    return 0.0
