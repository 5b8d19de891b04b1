"""NVML readings over time: the sample buffers (rate, depth, clock), GPM windows of chosen lengths,
power three ways side by side, and a poller that keeps all of them while a workload runs."""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from typing import Any

import pynvml

from realgpu.nvml_calls import GPM_METRICS, POWER_FIELDS, SAMPLE_KINDS, code_name, error_of, value_of
from realgpu.record import plain

CLOCKS = {"realtime": time.CLOCK_REALTIME, "monotonic": time.CLOCK_MONOTONIC, "boottime": time.CLOCK_BOOTTIME}


def clocks_us() -> dict[str, int]:
    return {name: time.clock_gettime_ns(clock) // 1000 for name, clock in CLOCKS.items()}


def nearest_clock(stamp_us: int, now_us: dict[str, int]) -> dict[str, Any]:
    """Which clock a sample's timestamp was read from: the one it trails by least (a sample is
    stamped at or before the call that returned it)."""
    offsets = {name: now - stamp_us for name, now in now_us.items()}
    closest = min(offsets, key=lambda name: abs(offsets[name]))
    return {"closest": closest, "offset_us": offsets, "stamp_us": stamp_us}


def read_samples(handle: Any, kind: str, last_seen: int = 0) -> list[tuple[int, Any]]:
    """(timestamp µs, value) newer than ``last_seen``, oldest first; none is [] (NVML: NOT_FOUND)."""
    try:
        value_type, samples = pynvml.nvmlDeviceGetSamples(handle, SAMPLE_KINDS[kind], last_seen)
    except pynvml.NVMLError as e:
        if e.value == pynvml.NVML_ERROR_NOT_FOUND:
            return []
        raise
    pairs = [(int(s.timeStamp), value_of(value_type, plain(s.sampleValue))) for s in samples]
    return sorted(pairs)


def time_weighted(pairs: list[tuple[int, Any]], anchor_us: int) -> float | None:
    """Mean of samples each covering the time since the one before it (the first: since
    ``anchor_us``, the newest sample before the window): sum(value x gap) / span."""
    total, prev = 0.0, anchor_us
    for stamp, value in pairs:
        total += float(value) * (stamp - prev)
        prev = stamp
    span = prev - anchor_us
    return total / span if span > 0 else None


def describe(pairs: list[tuple[int, Any]]) -> dict[str, Any]:
    if not pairs:
        return {"count": 0}
    stamps = [s for s, _ in pairs]
    values = [float(v) for _, v in pairs]
    gaps = [(b - a) / 1000 for a, b in itertools.pairwise(stamps)]
    out: dict[str, Any] = {
        "count": len(pairs),
        "span_s": (stamps[-1] - stamps[0]) / 1e6,
        "value_min": min(values),
        "value_max": max(values),
        "value_mean": statistics.fmean(values),
    }
    if gaps:
        out.update(gap_ms_median=statistics.median(gaps), gap_ms_min=min(gaps), gap_ms_max=max(gaps))
        out["per_second_in_buffer"] = (len(pairs) - 1) / out["span_s"] if out["span_s"] > 0 else None
    return out


def study_samples(handle: Any, wait_s: float) -> dict[str, Any]:
    """Each sample buffer read whole (lastSeenTimeStamp 0), its newest stamp against the three clocks,
    then what arrives in ``wait_s``: the sample period and depth on this GPU."""
    out: dict[str, Any] = {}
    newest: dict[str, int] = {}
    for kind in SAMPLE_KINDS:
        try:
            pairs = read_samples(handle, kind)
            now = clocks_us()
        except Exception as e:
            out[kind] = {"error": error_of(e)}
            continue
        out[kind] = {"whole_buffer": describe(pairs), "raw": pairs}
        if pairs:
            newest[kind] = pairs[-1][0]
            out[kind]["clock"] = nearest_clock(pairs[-1][0], now)
    if not newest or wait_s <= 0:
        return out
    t0 = time.monotonic()
    time.sleep(wait_s)
    waited = time.monotonic() - t0
    for kind, last in newest.items():
        try:
            fresh = read_samples(handle, kind, last)
        except Exception as e:
            out[kind]["after_wait"] = {"error": error_of(e)}
            continue
        out[kind]["after_wait"] = {
            "waited_s": waited,
            "new_samples": len(fresh),
            "per_second": len(fresh) / waited,
            "gaps": describe([(last, 0), *fresh]),
        }
    return out


class Gpm:
    """Two GPM samples of one GPU; metrics between any two."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        support = pynvml.nvmlGpmQueryDeviceSupport(handle)
        if not support.isSupportedDevice:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self.samples = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
        self.current = 0
        self.taken_at: float | None = None

    def take(self) -> None:
        self.current ^= 1
        pynvml.nvmlGpmSampleGet(self.handle, self.samples[self.current])
        self.taken_at = time.monotonic()

    def since_previous(self, metric_ids: tuple[int, ...] = tuple(GPM_METRICS)) -> dict[str, Any]:
        """Metrics between the previous sample and the current one."""
        req = pynvml.c_nvmlGpmMetricsGet_t()
        req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(metric_ids)
        req.sample1 = self.samples[self.current ^ 1]
        req.sample2 = self.samples[self.current]
        for i, metric in enumerate(metric_ids):
            req.metrics[i].metricId = metric
        pynvml.nvmlGpmMetricsGet(req)
        out: dict[str, Any] = {}
        for i, metric in enumerate(metric_ids):
            slot = req.metrics[i]
            ret = slot.nvmlReturn
            name = GPM_METRICS.get(metric, str(metric))
            out[name] = slot.value if ret == pynvml.NVML_SUCCESS else {"error": code_name(ret)}
        return out

    def window(self, seconds: float) -> dict[str, Any]:
        self.take()
        first = self.taken_at or 0.0
        time.sleep(seconds)
        self.take()
        return {
            "asked_s": seconds,
            "actual_s": (self.taken_at or 0.0) - first,
            "metrics": self.since_previous(),
        }

    def free(self) -> None:
        for s in self.samples:
            try:
                pynvml.nvmlGpmSampleFree(s)
            except pynvml.NVMLError:
                pass
        self.samples = []


def gpm_intervals(handle: Any, intervals: tuple[float, ...] = (0.05, 0.1, 0.2), repeats: int = 2) -> dict:
    """GPM metrics over windows of each length (NVML's docs ask for 100 ms or more: what 50 ms answers)."""
    gpm = Gpm(handle)
    out: dict[str, Any] = {}
    try:
        for seconds in intervals:
            rows = []
            for _ in range(repeats):
                try:
                    rows.append(gpm.window(seconds))
                except pynvml.NVMLError as e:
                    rows.append({"asked_s": seconds, "error": error_of(e)})
            out[f"{int(seconds * 1000)}ms"] = rows
    finally:
        gpm.free()
    return out


def power_row(handle: Any) -> dict[str, Any]:
    """Power usage (mW), the average and instant power fields (mW), the energy counter (mJ) and
    utilization (%), read back to back: a step shows how long each takes to follow. A reading a GPU
    lacks is None."""
    row: dict[str, Any] = {"t": time.monotonic()}
    try:
        row["util_gpu"] = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
    except pynvml.NVMLError:
        row["util_gpu"] = None
    try:
        row["usage_mw"] = pynvml.nvmlDeviceGetPowerUsage(handle)
    except pynvml.NVMLError:
        row["usage_mw"] = None
    try:
        fields = pynvml.nvmlDeviceGetFieldValues(handle, list(POWER_FIELDS))
        for key, v in zip(("average_mw", "instant_mw"), fields, strict=True):
            ok = v.nvmlReturn == pynvml.NVML_SUCCESS
            row[key] = value_of(v.valueType, plain(v.value)) if ok else None
    except pynvml.NVMLError:
        row["average_mw"] = row["instant_mw"] = None
    try:
        row["energy_mj"] = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    except (pynvml.NVMLError, AttributeError):
        row["energy_mj"] = None
    return row


def energy_power(rows: list[dict[str, Any]]) -> list[float | None]:
    """Power from the energy counter between consecutive rows (mJ/s = mW), None where it is missing."""
    out: list[float | None] = [None]
    for a, b in itertools.pairwise(rows):
        ok = a["energy_mj"] is not None and b["energy_mj"] is not None and b["t"] > a["t"]
        out.append((b["energy_mj"] - a["energy_mj"]) / (b["t"] - a["t"]) if ok else None)
    return out


def follow(rows: list[dict[str, Any]], key: str, t_load: float, t_unload: float | None) -> dict[str, Any]:
    """The idle level, the plateau (the load's last second), and the seconds after the step up (down)
    until the reading covered 90% of the way (``t_unload`` None: the step down is not looked at)."""
    pts = [(r["t"], r[key]) for r in rows if r.get(key) is not None]
    before = [v for t, v in pts if t < t_load]
    last = t_unload if t_unload is not None else pts[-1][0] + 1e-9 if pts else t_load
    plateau = [v for t, v in pts if last - 1.0 <= t < last]
    if not before or not plateau:
        return {"error": "no readings"}
    idle, top = statistics.median(before), statistics.median(plateau)
    if abs(top - idle) < max(1.0, 0.05 * abs(top)):
        return {"idle": idle, "plateau": top, "error": "no step seen"}
    up = next((t - t_load for t, v in pts if t >= t_load and v >= idle + 0.9 * (top - idle)), None)
    low = idle + 0.1 * (top - idle)
    down = next((t - t_unload for t, v in pts if t_unload is not None and t >= t_unload and v <= low), None)
    return {"idle": idle, "plateau": top, "rise_90_s": up, "fall_90_s": down}


def power_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def mean(key: str) -> float | None:
        vals = [r[key] for r in rows if r.get(key) is not None]
        return statistics.fmean(vals) if vals else None

    out = {k: mean(k) for k in ("usage_mw", "average_mw", "instant_mw")}
    first = next((r for r in rows if r.get("energy_mj") is not None), None)
    last = next((r for r in reversed(rows) if r.get("energy_mj") is not None), None)
    if first and last and last["t"] > first["t"]:
        out["energy_mw"] = (last["energy_mj"] - first["energy_mj"]) / (last["t"] - first["t"])
    return out


def power_side_by_side(handle: Any, seconds: float, hz: float = 10.0) -> dict[str, Any]:
    rows = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rows.append(power_row(handle))
        time.sleep(1 / hz)
    for row, derived in zip(rows, energy_power(rows), strict=True):
        row["energy_derived_mw"] = derived
    return {"summary": power_summary(rows), "rows": rows}


class Poller:
    """While a workload runs: power at 10 Hz, GPM over 200 ms windows, utilization at 1 Hz, each row
    stamped with time.monotonic() so a stage can cut out the rows of one phase."""

    TICK = 0.1

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.power: list[dict[str, Any]] = []
        self.gpm: list[dict[str, Any]] = []
        self.util: list[dict[str, Any]] = []
        self.errors: dict[str, str] = {}
        try:
            self._gpm: Gpm | None = Gpm(handle)
        except Exception as e:
            self._gpm = None
            self.errors["gpm"] = f"{type(e).__name__}: {e}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-poller", daemon=True)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        if self._gpm is not None:
            self._gpm.free()

    def _run(self) -> None:
        tick = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._guard("power", lambda: self.power.append(power_row(self.handle)))
            if tick % 2 == 0 and self._gpm is not None:
                self._guard("gpm", self._gpm_row)
            if tick % 10 == 0:
                self._guard("util", self._util_row)
            tick += 1
            next_at += self.TICK
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _guard(self, what: str, fn: Any) -> None:
        try:
            fn()
        except Exception as e:  # recorded once; the poller keeps the other readings going
            self.errors.setdefault(what, f"{type(e).__name__}: {e}")

    def _gpm_row(self) -> None:
        assert self._gpm is not None
        primed = self._gpm.taken_at is not None
        self._gpm.take()
        if primed:
            self.gpm.append({"t": time.monotonic(), **self._gpm.since_previous()})

    def _util_row(self) -> None:
        u = pynvml.nvmlDeviceGetUtilizationRates(self.handle)
        self.util.append({"t": time.monotonic(), "gpu": u.gpu, "memory": u.memory})

    def between(self, t0: float, t1: float) -> dict[str, Any]:
        """The means of each reading over [t0, t1] (a GPM row covers the 200 ms before its stamp)."""

        def rows(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [r for r in list(series) if t0 <= r["t"] <= t1]

        def mean(series: list[dict[str, Any]], key: str) -> float | None:
            vals = [r[key] for r in series if isinstance(r.get(key), int | float)]
            return statistics.fmean(vals) if vals else None

        util, gpm, power = rows(self.util), rows(self.gpm), rows(self.power)
        return {
            "utilization_1hz": {"mean": mean(util, "gpu"), "values": [r["gpu"] for r in util]},
            "gpm_200ms": {name: mean(gpm, name) for name in GPM_METRICS.values()} | {"windows": len(gpm)},
            "power": power_summary(power),
        }
