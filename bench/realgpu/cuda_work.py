"""CUDA workloads whose truth is known: matrix-product bursts timed with CUDA events, duty cycles of
them, and a busy-wait kernel (``torch.cuda._sleep``) that stands in for a collective spinning."""

from __future__ import annotations

import math
import time
from typing import Any

from realgpu.nvml_timing import Poller, energy_power, follow, read_samples, time_weighted
from realgpu.record import Skip

MATMUL_N = 8192  # bf16: ~1.1 TFLOP a product, about 1.4 ms on an H200
STEP_KEYS = ("usage_mw", "average_mw", "instant_mw", "energy_derived_mw", "util_gpu")


def cuda_torch() -> Any:
    try:
        import torch
    except Exception as e:
        raise Skip(f"no CUDA: torch not importable ({type(e).__name__}: {e})") from None
    if not torch.cuda.is_available():
        raise Skip("torch.cuda.is_available() is False")
    return torch


class Matmul:
    """Back-to-back bf16 products; ``burst(s)`` keeps the GPU busy about ``s`` seconds."""

    def __init__(self, torch: Any, n: int = MATMUL_N) -> None:
        self.torch = torch
        self.n = n
        self.a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        self.b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        self.out = torch.empty_like(self.a)
        self.gpu_seconds(200)  # warm-up: cuBLAS picks its kernel, the clocks leave idle
        self.per_call_s = self.gpu_seconds(100) / 100

    def gpu_seconds(self, calls: int) -> float:
        """Run ``calls`` products; their GPU time by CUDA events."""
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            torch.mm(self.a, self.b, out=self.out)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000

    def burst(self, seconds: float) -> float:
        return self.gpu_seconds(max(1, round(seconds / self.per_call_s)))


def duty_cycle(mm: Matmul, poll: Poller, busy_ms: int, idle_ms: int, seconds: float) -> dict[str, Any]:
    """``busy_ms`` of products then ``idle_ms`` of nothing, for ``seconds``. The truth is the GPU time
    the CUDA events measured over the wall time; beside it what NVML said over the same span."""
    anchor = _newest_sample(poll.handle)
    t0 = time.monotonic()
    busy, cycles = 0.0, 0
    while time.monotonic() - t0 < seconds:
        busy += mm.burst(busy_ms / 1000)
        time.sleep(idle_ms / 1000)
        cycles += 1
    t1 = time.monotonic()
    out: dict[str, Any] = {
        "busy_ms": busy_ms,
        "idle_ms": idle_ms,
        "seconds": t1 - t0,
        "cycles": cycles,
        "truth_pct": 100 * busy / (t1 - t0),
        **poll.between(t0, t1),
    }
    if anchor is None:
        out["samples_weighted_pct"] = {"skipped": "no utilization samples (nvmlDeviceGetSamples)"}
    else:
        pairs = read_samples(poll.handle, "gpu_utilization", anchor)
        out["samples_weighted_pct"] = time_weighted(pairs, anchor)
        out["samples_in_span"] = len(pairs)
    return out


def _newest_sample(handle: Any) -> int | None:
    try:
        pairs = read_samples(handle, "gpu_utilization")
    except Exception:
        return None
    return pairs[-1][0] if pairs else None


def power_step(mm: Matmul, poll: Poller, idle_s: float = 1.5, load_s: float = 3.0) -> dict[str, Any]:
    """Idle, full load, idle: how long each power reading, and utilization, takes to follow the step
    (their averaging), read at the poller's 10 Hz."""
    t_begin = time.monotonic()
    time.sleep(idle_s)
    t_load = time.monotonic()
    mm.burst(load_s)
    t_unload = time.monotonic()
    time.sleep(idle_s + 0.5)
    t_end = time.monotonic()
    rows = [r for r in list(poll.power) if t_begin <= r["t"] <= t_end]
    for row, derived in zip(rows, energy_power(rows), strict=True):
        row["energy_derived_mw"] = derived
    out: dict[str, Any] = {"load_seconds": t_unload - t_load}
    for key in STEP_KEYS:
        out[key] = follow(rows, key, t_load, t_unload)
    out["rows"] = [{**r, "t": round(r["t"] - t_load, 3)} for r in rows]
    return out


def spin(torch: Any, mm: Matmul, poll: Poller, idle_s: float, spin_s: float, compute_s: float) -> dict:
    """Idle, then a single busy-waiting thread kept on the GPU (what NCCL's kernels do while a
    collective waits), then products for contrast: each phase's readings."""
    per_cycle_s = _sleep_seconds_per_cycle(torch)
    kernel_s = 0.05
    cycles = int(kernel_s / per_cycle_s)
    phases: dict[str, Any] = {"sleep_kernel": {"cycles": cycles, "seconds_per_cycle": per_cycle_s}}
    t0 = time.monotonic()
    time.sleep(idle_s)
    t1 = time.monotonic()
    phases["idle"] = poll.between(t0, t1)
    while time.monotonic() - t1 < spin_s:
        for _ in range(max(1, math.ceil(0.5 / kernel_s))):  # half a second queued at a time
            torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
    t2 = time.monotonic()
    phases["spin"] = poll.between(t1 + 0.5, t2)  # past the first readings' averaging of idle
    mm.burst(compute_s)
    t3 = time.monotonic()
    phases["compute"] = poll.between(t2 + 0.5, t3)
    return phases


def _sleep_seconds_per_cycle(torch: Any) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)  # wakes the clocks
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000 / 20_000_000
