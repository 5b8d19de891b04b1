"""CPU per GpuCollector.collect() with 1, 2, 4, 8 and 16 fake GPUs, next to the same NVML reads made
with bare nvidia-ml-py calls in the same run (the peer: what the binding and the driver cost anyway).

    .venv/bin/python bench/gpu_scaling.py            # 2000 ticks per size
    .venv/bin/python bench/gpu_scaling.py --quick    # 200 ticks per size

Every GPU is busy: utilization, memory, power, GPM, PCIe and NVLink counters, two compute processes,
ECC and row-remap counters, so every call the collector makes returns data. CPU is this process's
(time.process_time: user + system, all threads). The Xid event thread is off while measuring: the
fake's event wait polls its state file, which a real driver's blocking wait does not, so it would
bill the fake's polling to the collector. Prints ms per tick, the per-GPU slope of a least-squares
line through the sizes with its R² (1.0 = exactly linear), and the collector/peer ratio.
Goal: linear growth, and a GPU share well under the 5 ms budget of a whole telemetry tick at 8 GPUs.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pynvml  # noqa: E402
import structlog  # noqa: E402

from agent.devtools.fake_nvml import LIBRARY, device, state, write_state  # noqa: E402
from agent.sources.gpu import nvml_gpm  # noqa: E402
from agent.sources.gpu.binding import load_library  # noqa: E402
from agent.sources.gpu.collector import GPM_METRICS, GpuCollector  # noqa: E402
from agent.sources.gpu.nvml import ALL_LINKS  # noqa: E402

SIZES = (1, 2, 4, 8, 16)
FIELDS = [
    (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0),
    (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0),
    (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS),
    (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS),
]


def busy_state(gpus: int) -> dict:
    return state(
        [
            device(
                i,
                utilization_gpu=96,
                utilization_memory=45,
                memory_used_bytes=70 * 1024**3,
                power_mw=650_000,
                temperature_c=68,
                clocks_event_reasons=0x4,
                pcie_tx_bytes=10**12 + i,
                pcie_rx_bytes=2 * 10**12 + i,
                nvlink_tx_kib=10**9,
                nvlink_rx_kib=10**9,
                sm_active=82.0,
                tensor_active=55.0,
                dram_active=61.0,
                ecc_uncorrected=0,
                # ticks here come back to back, not a second apart: the fake's shortest buffer period
                # (20 ms: the agent takes closer samples for one seen again) so drains find samples
                # now and then, and no GPM floor
                sample_period_seconds=0.02,
                gpm_min_interval_seconds=0,
                processes=[
                    {"pid": 1000 + i, "used_memory_bytes": 60 * 1024**3},
                    {"pid": 2000 + i, "used_memory_bytes": 1024**3},
                ],
            )
            for i in range(gpus)
        ]
    )


def bare_reads() -> Callable[[], None]:
    """The collector's per-GPU reads as plain pynvml calls: no error handling, no snapshot objects."""
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    samples = [[pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()] for _ in handles]
    for h, (first, _) in zip(handles, samples, strict=True):
        pynvml.nvmlGpmSampleGet(h, first)

    def tick() -> list[tuple]:
        # every value the collector keeps, read once, into a plain tuple per GPU
        out = []
        for h, pair in zip(handles, samples, strict=True):
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
            fv = pynvml.nvmlDeviceGetFieldValues(h, FIELDS)
            pynvml.nvmlGpmSampleGet(h, pair[1])
            req = pynvml.c_nvmlGpmMetricsGet_t()
            req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = len(GPM_METRICS)
            req.sample1, req.sample2 = pair
            metrics = req.metrics
            for i, m in enumerate(GPM_METRICS):
                metrics[i].metricId = m
            pynvml.nvmlGpmMetricsGet(req)
            pair.reverse()
            out.append(
                (
                    util.gpu,
                    util.memory,
                    mem.used,
                    mem.total,
                    pynvml.nvmlDeviceGetPowerUsage(h),
                    pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
                    pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                    pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                    pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
                    [v.value.ullVal for v in fv],
                    [metrics[i].value for i in range(len(GPM_METRICS))],
                    [(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)],
                    pynvml.nvmlDeviceGetTotalEccErrors(
                        h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
                    ),
                    pynvml.nvmlDeviceGetRemappedRows(h),
                )
            )
        return out

    def close() -> None:
        for pair in samples:
            for s in pair:
                pynvml.nvmlGpmSampleFree(s)
        pynvml.nvmlShutdown()

    tick.close = close  # type: ignore[attr-defined]
    return tick


def cpu_ms_per_call(fn: Callable[[], object], ticks: int) -> float:
    for _ in range(5):
        fn()
    t0 = time.process_time()
    for _ in range(ticks):
        fn()
    return (time.process_time() - t0) / ticks * 1000


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares: slope, intercept and R² (1.0 = every size exactly on the line)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    residual = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys, strict=True))
    total = sum((y - my) ** 2 for y in ys)
    return slope, intercept, 1 - residual / total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 ticks per size instead of 2000")
    ap.add_argument("--ticks", type=int, default=None)
    args = ap.parse_args()
    ticks = args.ticks or (200 if args.quick else 2000)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    subprocess.run(["make", "-s", "fakenvml"], cwd=REPO, check=True)
    load_library(str(LIBRARY))
    # every tick reads GPM, as a tick a second apart does (the agent keeps GPM's 100 ms floor itself)
    nvml_gpm.MIN_INTERVAL = 0.0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.json"
        os.environ["FAKE_NVML_STATE"] = str(path)
        for n in SIZES:
            write_state(path, busy_state(n))
            collector = GpuCollector(library=str(LIBRARY), xid_events=False)
            part = collector.collect()
            assert len(part.gpus) == n and all(g.up and g.sm_active is None for g in part.gpus)
            assert collector.collect().gpus[0].sm_active == 0.82  # every read returns data
            ours = cpu_ms_per_call(collector.collect, ticks)
            collector.close()
            bare = bare_reads()
            peer = cpu_ms_per_call(bare, ticks)
            bare.close()  # type: ignore[attr-defined]
            rows.append((n, ours, peer))
        write_state(path, busy_state(8))
        full = GpuCollector(library=str(LIBRARY))  # default: with the Xid event thread
        full.collect()
        with_xid = cpu_ms_per_call(full.collect, ticks)
        full.close()

    print(f"GpuCollector.collect() CPU per tick, {ticks} ticks per size (fake NVML, every GPU busy)")
    print(f"{'GPUs':>5} {'collector ms':>13} {'bare pynvml ms':>15} {'ratio':>6} {'ms/GPU':>7}")
    for n, ours, peer in rows:
        print(f"{n:>5} {ours:>13.3f} {peer:>15.3f} {ours / peer:>6.2f} {ours / n:>7.3f}")
    slope, intercept, r2 = fit([float(r[0]) for r in rows], [r[1] for r in rows])
    pslope, pintercept, pr2 = fit([float(r[0]) for r in rows], [r[2] for r in rows])
    print(f"linear fit, collector: {slope:.3f} ms per GPU + {intercept:.3f} ms, R² {r2:.4f}")
    print(f"linear fit, bare pynvml: {pslope:.3f} ms per GPU + {pintercept:.3f} ms, R² {pr2:.4f}")
    print(f"per-GPU slope collector/bare: {slope / pslope:.2f}")
    eight = next(r[1] for r in rows if r[0] == 8)
    print(
        f"8 GPUs: {eight:.3f} ms per tick ({eight / 5:.0%} of the 5 ms tick budget); "
        f"with the Xid thread on the fake: {with_xid:.3f} ms"
    )


if __name__ == "__main__":
    main()
