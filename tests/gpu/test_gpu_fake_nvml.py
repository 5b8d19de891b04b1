"""The fake libnvidia-ml.so.1 through the real nvidia-ml-py binding: the state file contract of
docs/fake-nvml.md, struct layouts, and the ways it fails like a real driver."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import ctypes
import itertools
import json
import random
import time
from pathlib import Path

import pynvml
import pytest
from gpu_fixtures import fake_nvml, fake_nvml_library, nvml  # noqa: F401

from agent.devtools.fake_nvml import PRODUCTS, FakeNvml, device, write_state
from agent.sources.gpu.binding import load_library


def handle(i: int = 0):
    return pynvml.nvmlDeviceGetHandleByIndex(i)


def test_every_value_comes_from_the_state_with_real_struct_layouts(nvml: FakeNvml) -> None:
    nvml.set(
        1,
        utilization_gpu=87,
        utilization_memory=41,
        memory_total_bytes=85_000_000_000,
        memory_used_bytes=60_000_000_000,
        memory_reserved_bytes=500_000_000,
        power_mw=612_345,
        power_limit_mw=700_000,
        temperature_c=71,
        sm_clock_mhz=1755,
        clocks_event_reasons=0x24,
        pcie_tx_bytes=2**63 + 5,  # a 64-bit counter survives the JSON round trip exactly
        pcie_rx_bytes=123,
        nvlink_tx_kib=7,
        nvlink_rx_kib=9,
        ecc_uncorrected=3,
        row_remap_failure=True,
        processes=[{"pid": 4242, "used_memory_bytes": 1 << 30}, {"pid": 77, "used_memory_bytes": None}],
    )
    h = handle(1)
    assert pynvml.nvmlSystemGetDriverVersion() == "550.90.07"
    assert pynvml.nvmlDeviceGetCount() == 8
    assert pynvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    assert pynvml.nvmlDeviceGetUUID(h) == nvml.device(1)["uuid"]
    pci = pynvml.nvmlDeviceGetPciInfo_v3(h)
    assert (pci.busId, pci.bus) == ("00000000:2A:00.0", 0x2A)
    u = pynvml.nvmlDeviceGetUtilizationRates(h)
    assert (u.gpu, u.memory) == (87, 41)
    m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert (m2.total, m2.used, m2.reserved) == (85_000_000_000, 60_000_000_000, 500_000_000)
    m1 = pynvml.nvmlDeviceGetMemoryInfo(h)  # v1 counts the reservation as used
    assert m1.used == 60_500_000_000 and m1.free == 85_000_000_000 - 60_500_000_000
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 612_345
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == 700_000
    assert pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) == 71
    assert pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 1755
    assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(h) == 0x24
    fv = pynvml.nvmlDeviceGetFieldValues(
        h,
        [
            (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0),
            (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0xFFFFFFFF),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0xFFFFFFFF),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0),  # one link: not kept
        ],
    )
    assert [v.nvmlReturn for v in fv] == [0, 0, 0, 0, pynvml.NVML_ERROR_NOT_SUPPORTED]
    assert [v.value.ullVal for v in fv[:4]] == [2**63 + 5, 123, 7, 9]
    assert fv[0].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG and fv[0].timestamp > 0
    ecc = pynvml.nvmlDeviceGetTotalEccErrors(
        h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
    )
    assert ecc == 3
    assert pynvml.nvmlDeviceGetRemappedRows(h) == (0, 0, 0, 1)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(4242, 1 << 30), (77, None)]
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(handle(0)) == []


def test_gpm_samples_and_metrics(nvml: FakeNvml) -> None:
    nvml.set(0, sm_active=62.5, tensor_active=40.0, dram_active=None)
    nvml.set(1, sm_active=None, tensor_active=None, dram_active=None)
    h = handle(0)
    assert pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 1
    assert pynvml.nvmlGpmQueryDeviceSupport(handle(1)).isSupportedDevice == 0
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    try:
        pynvml.nvmlGpmSampleGet(h, s1)
        time.sleep(0.11)  # NVML: more than 100 ms apart
        pynvml.nvmlGpmSampleGet(h, s2)
        req = pynvml.c_nvmlGpmMetricsGet_t()
        req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = 3
        req.sample1, req.sample2 = s1, s2
        for i, metric in enumerate((2, 5, 10)):  # SM_UTIL, ANY_TENSOR_UTIL, DRAM_BW_UTIL
            req.metrics[i].metricId = metric
        pynvml.nvmlGpmMetricsGet(req)
        got = [(req.metrics[i].nvmlReturn, req.metrics[i].value) for i in range(3)]
        assert got == [(0, 62.5), (0, 40.0), (pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0)]
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlGpmSampleGet(handle(1), s1)
    finally:
        pynvml.nvmlGpmSampleFree(s1)
        pynvml.nvmlGpmSampleFree(s2)


COMPUTE = {"utilization_gpu": 97, "utilization_memory": 58, "power_mw": 560_000, "sm_active": 82.0}
SPIN = {"utilization_gpu": 100, "utilization_memory": 1, "power_mw": 115_000, "sm_active": 3.0}


def _integrals(phases: list[tuple[float, dict[str, float]]]) -> list[dict[str, float]]:
    """The running integrals at each phase's start, as a writer that keeps them would carry them."""
    out, total = [], dict.fromkeys(COMPUTE, 0.0)
    for i, (at, _) in enumerate(phases):
        if i:
            before_at, before = phases[i - 1]
            total = {k: total[k] + before[k] * (at - before_at) for k in total}
        out.append({"at": at, **total})
    return out


def _mean(phases: list[tuple[float, dict[str, float]]], key: str, a: float, b: float) -> float:
    """What a real GPU reports for ``key`` over [a, b]: the time-weighted mean of the phases."""
    ends = [at for at, _ in phases[1:]] + [float("inf")]
    covered = sum(
        v[key] * max(0.0, min(b, end) - max(a, at)) for (at, v), end in zip(phases, ends, strict=True)
    )
    return covered / (b - a)


def test_readings_averaged_over_time_as_a_real_gpu_reports_them(nvml: FakeNvml) -> None:
    """A real GPU reports utilization over its sample period, power over 1 s (Ampere and later, but
    GA100) and GPM between two samples; with running integrals in the state the fake does too, so a
    sampler slower than the job's steps reads their mix, not whichever phase its instant hit."""
    t = time.monotonic()
    past = [(t - 0.6, COMPUTE), (t - 0.2, SPIN)]  # computed 0.4 s, spinning since 0.2 s ago
    nvml.set(0, **SPIN, integrals=_integrals(past), utilization_average_seconds=1, power_average_seconds=1)
    # instant power (GA100): an explicit 0 wins over the H100 name's 1 s
    nvml.set(1, **SPIN, integrals=_integrals(past), utilization_average_seconds=0.1, power_average_seconds=0)
    h0, h1 = handle(0), handle(1)
    before = time.monotonic()
    util, power = pynvml.nvmlDeviceGetUtilizationRates(h0), pynvml.nvmlDeviceGetPowerUsage(h0)
    after = time.monotonic()
    for got, key, scale in ((util.gpu, "utilization_gpu", 1), (power, "power_mw", 1)):
        # the window is the last second, cut to the first integral's time: [t - 0.6, now]
        lo, hi = sorted(_mean(past, key, t - 0.6, q) for q in (before, after))
        assert lo - scale <= got <= hi + scale, (key, got, lo, hi)
    assert 98 <= util.gpu <= 99 and 350_000 < power < 420_000  # the mix, neither phase's value
    assert pynvml.nvmlDeviceGetPowerUsage(h1) == 115_000  # no averaging interval: the instant's
    assert pynvml.nvmlDeviceGetUtilizationRates(h1).memory == 1  # 0.1 s back: all spinning

    # GPM: the mean between the two samples, across a change that the state had scheduled
    t = time.monotonic()
    ahead = [(t - 0.5, COMPUTE), (t + 0.15, SPIN)]
    nvml.set(0, **SPIN, integrals=_integrals(ahead))
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    try:
        a0 = time.monotonic()
        pynvml.nvmlGpmSampleGet(h0, s1)
        a1 = time.monotonic()
        time.sleep(0.3)
        b0 = time.monotonic()
        pynvml.nvmlGpmSampleGet(h0, s2)
        b1 = time.monotonic()
        req = pynvml.c_nvmlGpmMetricsGet_t()
        req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = 1
        req.sample1, req.sample2 = s1, s2
        req.metrics[0].metricId = 2  # SM_UTIL
        pynvml.nvmlGpmMetricsGet(req)
        got = req.metrics[0].value
        bounds = [_mean(ahead, "sm_active", a, b) for a in (a0, a1) for b in (b0, b1)]
        assert min(bounds) - 1e-6 <= got <= max(bounds) + 1e-6, (got, bounds)
        assert 20 < got < 60
        # samples in reverse order get the later one's own reading, as without integrals: the state's
        # value (which holds from the last item's time on)
        req.sample1, req.sample2 = s2, s1
        pynvml.nvmlGpmMetricsGet(req)
        assert req.metrics[0].value == 3.0
    finally:
        pynvml.nvmlGpmSampleFree(s1)
        pynvml.nvmlGpmSampleFree(s2)


def test_integrals_that_go_back_are_refused(nvml: FakeNvml, capfd: pytest.CaptureFixture[str]) -> None:
    nvml.set(0, power_mw=200_000)
    assert pynvml.nvmlDeviceGetPowerUsage(handle(0)) == 200_000
    nvml.set(0, integrals=[{"at": 5.0, "power_mw": 10.0}, {"at": 4.0, "power_mw": 20.0}])
    assert pynvml.nvmlDeviceGetPowerUsage(handle(0)) == 200_000
    assert (
        "devices[0].integrals: item 1: at must increase; keeping the previous state" in capfd.readouterr().err
    )
    nvml.set(0, integrals=[{"at": 4.0, "power_mw": 20.0}, {"at": 5.0, "power_mw": 10.0}])
    assert pynvml.nvmlDeviceGetPowerUsage(handle(0)) == 200_000
    assert "item 1: power_mw must not decrease" in capfd.readouterr().err


def test_a_rewritten_state_file_is_read_on_the_next_call(nvml: FakeNvml) -> None:
    h = handle(2)
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 70_000
    for watts in (100, 200, 300):
        nvml.set(2, power_mw=watts * 1000)
        assert pynvml.nvmlDeviceGetPowerUsage(h) == watts * 1000


def test_a_broken_state_file_keeps_the_last_good_state(
    nvml: FakeNvml, capfd: pytest.CaptureFixture[str]
) -> None:
    nvml.set(0, temperature_c=55)
    assert pynvml.nvmlDeviceGetTemperature(handle(0), 0) == 55
    nvml.path.write_text('{"devices": [{"index": 0, "temperature_c": "hot"}]}')
    assert pynvml.nvmlDeviceGetTemperature(handle(0), 0) == 55
    assert "devices[0].temperature_c: expected a number; keeping the previous state" in capfd.readouterr().err
    nvml.path.write_text('{"devices": [')  # half written by a careless tool
    assert pynvml.nvmlDeviceGetCount() == 8
    assert "unexpected end of input" in capfd.readouterr().err


def test_xid_events_are_delivered_once_each(nvml: FakeNvml) -> None:
    events = pynvml.nvmlEventSetCreate()
    try:
        for i in range(8):
            pynvml.nvmlDeviceRegisterEvents(handle(i), pynvml.nvmlEventTypeXidCriticalError, events)
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait(events, 50)
        nvml.add_xid(3, 79)
        nvml.add_xid(5, 48)
        got = []
        for _ in range(2):
            data = pynvml.nvmlEventSetWait(events, 1000)
            index = pynvml.nvmlDeviceGetIndex(data.device)
            got.append((index, data.eventType, data.eventData))
        assert sorted(got) == [(3, 8, 79), (5, 8, 48)]
        nvml.set(0, temperature_c=40)  # rewriting the file must not hand the same seqs out again
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait(events, 100)
    finally:
        pynvml.nvmlEventSetFree(events)


def _voluntary_switches() -> int:
    """The calling thread's sleeps so far: each time it gave up the CPU to wait (kernel's
    voluntary_ctxt_switches in /proc/thread-self/status)."""
    with open("/proc/thread-self/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc/thread-self/status")


def test_an_event_wait_blocks_until_the_event_as_the_drivers_does(nvml: FakeNvml) -> None:
    """A real nvmlEventSetWait sleeps in the kernel until an event or its timeout: the fake's wakes
    when its state file gains an Xid, not on a poll's next turn, and a wait with nothing to deliver
    wakes its thread next to never (polling every 50 ms cost the agent's Xid thread ~1.3 ms of CPU
    a second). Counted in wake-ups, not CPU: what a wake-up costs depends on the machine (a slow
    VM's 150-300 us made a 1 ms CPU bar fail a clean clone), how often it wakes does not."""
    import threading

    events = pynvml.nvmlEventSetCreate()
    try:
        pynvml.nvmlDeviceRegisterEvents(handle(2), pynvml.nvmlEventTypeXidCriticalError, events)
        wakes0 = _voluntary_switches()
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait(events, 1500)
        wakes = _voluntary_switches() - wakes0
        # here 2 (poll() gives up a second at a time); polling every 50 ms, 30
        assert wakes < 10, f"the thread slept {wakes} times in a 1.5 s wait with no event"
        written: list[float] = []
        writer = threading.Timer(0.3, lambda: (nvml.add_xid(2, 79), written.append(time.monotonic())))
        writer.start()
        data = pynvml.nvmlEventSetWait(events, 5000)
        woke = time.monotonic()
        writer.join()
        assert (pynvml.nvmlDeviceGetIndex(data.device), data.eventData) == (2, 79)
        assert woke - written[0] < 0.2, f"woke {woke - written[0]:.3f} s after the Xid was written"
    finally:
        pynvml.nvmlEventSetFree(events)


def test_lost_unsupported_and_delayed_devices(nvml: FakeNvml) -> None:
    nvml.set(4, lost=True)
    nvml.set(6, unsupported=["nvmlDeviceGetPowerUsage", "nvmlDeviceGetComputeRunningProcesses"])
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        handle(4)
    h6 = handle(6)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetPowerUsage(h6)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # the base name covers every version
        pynvml.nvmlDeviceGetComputeRunningProcesses_v3(h6)
    assert pynvml.nvmlDeviceGetTemperature(h6, 0) == 32
    h7 = handle(7)
    nvml.set(7, delay_ms=300)
    t0 = time.monotonic()
    pynvml.nvmlDeviceGetTemperature(h7, 0)
    assert time.monotonic() - t0 >= 0.29


def test_missing_functions_are_absent_symbols_like_an_older_driver(
    nvml: FakeNvml,
    fake_nvml_library: Path,
) -> None:
    nvml.set_top(missing_functions=["nvmlDeviceGetFieldValues", "nvmlGpmMetricsGet"])
    pynvml.nvmlDeviceGetCount()  # any call reads the new state
    fresh = ctypes.CDLL(str(fake_nvml_library))  # a new CDLL object asks dlsym() again
    assert not hasattr(fresh, "nvmlDeviceGetFieldValues")
    assert not hasattr(fresh, "nvmlGpmMetricsGet")
    assert hasattr(fresh, "nvmlDeviceGetPowerUsage")
    # a caller holding an old pointer gets FunctionNotFound from the function itself
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetFieldValues(handle(0), [pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES])
    nvml.set_top(missing_functions=[])
    pynvml.nvmlDeviceGetCount()
    assert hasattr(ctypes.CDLL(str(fake_nvml_library)), "nvmlDeviceGetFieldValues")


def test_driver_error_and_no_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_nvml_library: Path
) -> None:
    load_library(str(fake_nvml_library))
    path = tmp_path / "state.json"
    write_state(path, {"driver_error": "DRIVER_NOT_LOADED", "devices": [device(0)]})
    monkeypatch.setenv("FAKE_NVML_STATE", str(path))
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()
    monkeypatch.setenv("FAKE_NVML_STATE", str(tmp_path / "absent.json"))
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()
    path.write_text(json.dumps({"devices": [device(0)]}))
    monkeypatch.setenv("FAKE_NVML_STATE", str(path))
    pynvml.nvmlInit()
    try:
        assert pynvml.nvmlDeviceGetCount() == 1
    finally:
        pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_garbled_state_files_never_crash_the_library(nvml: FakeNvml) -> None:
    good = nvml.path.read_bytes()
    rng = random.Random(7)
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            op = rng.random()
            if op < 0.4:
                data[i] = rng.randrange(256)
            elif op < 0.7:
                del data[i : i + rng.randint(1, 40)]
            else:
                data[i:i] = rng.choice([b"{", b"]", b'"', b"\\u12", b"-1", b"1e999", b"null", b"\x00"])
        nvml.path.write_bytes(bytes(data))
        try:  # either the garbled state parses or the previous one stays; never a crash
            count = pynvml.nvmlDeviceGetCount()
            assert 0 <= count <= 64
        except pynvml.NVMLError as e:
            assert isinstance(e, pynvml.NVMLError_DriverNotLoaded | pynvml.NVMLError_Unknown), e
    nvml.write()
    assert pynvml.nvmlDeviceGetCount() == 8


def test_the_labs_gpus_with_integrals_read_as_real_ones(nvml: FakeNvml) -> None:
    """lab.gpu's writer keeps the running integrals, and a second writer on the same file (the
    trainer after the lab's idle) carries them on: a 1 s power mean spans both."""
    from lab.gpu import LabGpus

    lab = LabGpus(nvml.path, gpus=2, averaged=True)
    lab.phase("compute", pid=4242)
    time.sleep(0.4)
    trainer = LabGpus(nvml.path, gpus=2, averaged=True)  # writes idle first, as a new writer does
    trainer.phase("spin", pid=4242)
    time.sleep(0.2)
    power = pynvml.nvmlDeviceGetPowerUsage(handle(0))
    # ~0.4 s at 560 W, then ~0.2 s spinning at 115 W (the idle in between lasted microseconds)
    assert 330_000 < power < 470_000, power
    assert pynvml.nvmlDeviceGetPowerUsage(handle(1)) == 115_000  # GA100: the instant's
    items = json.loads(nvml.path.read_text())["devices"][0]["integrals"]
    assert [x["at"] for x in items] == sorted(x["at"] for x in items) and len(items) >= 4
    assert items[-1]["power_mw"] > 0.3 * 560_000  # carried on, not started over


# --- as a real GPU answers by default: the sample buffer, the energy counter, the power fields, GPM's
# graphics util and 100 ms floor, and each product's defaults (docs/fake-nvml.md) ---------------------

BUSY = {"utilization_gpu": 80, "utilization_memory": 40, "power_mw": 500_000, "sm_active": 70.0}
IDLE = {"utilization_gpu": 0, "utilization_memory": 0, "power_mw": 100_000, "sm_active": 0.0}
PERIOD = 1 / 6  # the fake's default sample period


def _history(phases: list[tuple[float, dict[str, float]]]) -> list[dict[str, float]]:
    out, total = [], dict.fromkeys(BUSY, 0.0)
    for i, (at, _) in enumerate(phases):
        if i:
            before_at, before = phases[i - 1]
            total = {k: total[k] + before[k] * (at - before_at) for k in total}
        out.append({"at": at, **total})
    return out


def test_the_sample_buffer_holds_the_drivers_samples(nvml: FakeNvml) -> None:
    nvml.set(0, utilization_gpu=50)
    kind, got = pynvml.nvmlDeviceGetSamples(handle(0), pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    assert kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert len(got) == 100 and {s.sampleValue.uiVal for s in got} == {50}  # the whole buffer
    stamps = [s.timeStamp for s in got]
    gaps = {b - a for a, b in itertools.pairwise(stamps)}
    assert gaps <= {166_666, 166_667, 166_668}, gaps  # one sample per period, oldest first
    _, newer = pynvml.nvmlDeviceGetSamples(handle(0), pynvml.NVML_GPU_UTILIZATION_SAMPLES, stamps[-5])
    assert [s.timeStamp for s in newer][:4] == stamps[-4:] and all(s.timeStamp > stamps[-5] for s in newer)
    # an idle GPU records no utilization sample: the buffer comes back empty; power is still sampled
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetSamples(handle(1), pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    _, power = pynvml.nvmlDeviceGetSamples(handle(1), pynvml.NVML_TOTAL_POWER_SAMPLES, 0)
    assert {s.sampleValue.uiVal for s in power} == {70_000}
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetSamples(handle(1), pynvml.NVML_PROCESSOR_CLK_SAMPLES, 0)
    nvml.set(1, sample_buffer_depth=0)  # a GPU without the buffer
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetSamples(handle(1), pynvml.NVML_TOTAL_POWER_SAMPLES, 0)


def test_each_sample_is_the_mean_of_its_period_across_a_change(nvml: FakeNvml) -> None:
    t = time.monotonic()
    phases = [(t - 2.0, BUSY), (t - 1.05, IDLE)]  # busy, then idle since 1.05 s ago
    nvml.set(2, **IDLE, integrals=_history(phases), sample_clock="monotonic")
    _, power = pynvml.nvmlDeviceGetSamples(handle(2), pynvml.NVML_TOTAL_POWER_SAMPLES, 0)
    for s in power:  # on the monotonic clock a timestamp is the grid time itself
        end = s.timeStamp / 1e6
        start = max(end - PERIOD, phases[0][0])  # the first is cut short to the history's start
        assert abs(s.sampleValue.uiVal - _mean(phases, "power_mw", start, end)) <= 2, s  # µs stamps
    assert 12 <= len(power) <= 13  # the buffer starts with the history: 2 s of 1/6 s
    assert len({s.sampleValue.uiVal for s in power}) == 3  # busy, the period of the change, idle
    _, util = pynvml.nvmlDeviceGetSamples(handle(2), pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    # the idle periods recorded nothing: a reader weights each sample by the period, not the gap
    assert all(s.timeStamp / 1e6 - PERIOD < t - 1.05 for s in util) and 6 <= len(util) <= 7
    assert 0 < util[-1].sampleValue.uiVal < 80  # the period of the change: its mean


@pytest.mark.parametrize(
    "clock, clock_id",
    [
        ("realtime", time.CLOCK_REALTIME),
        ("boottime", time.CLOCK_BOOTTIME),
        ("monotonic", time.CLOCK_MONOTONIC),
    ],
)
def test_sample_timestamps_are_on_the_configured_clock(nvml: FakeNvml, clock: str, clock_id: int) -> None:
    nvml.set(3, power_mw=200_000, sample_clock=clock)
    _, got = pynvml.nvmlDeviceGetSamples(handle(3), pynvml.NVML_TOTAL_POWER_SAMPLES, 0)
    now_us = time.clock_gettime(clock_id) * 1e6
    assert 0 <= now_us - got[-1].timeStamp <= PERIOD * 1e6 + 5_000, (clock, now_us - got[-1].timeStamp)


def test_the_energy_counter_integrates_the_power(nvml: FakeNvml) -> None:
    t = time.monotonic()
    phases = [(t - 0.5, {**BUSY, "power_mw": 300_000}), (t + 0.25, {**IDLE, "power_mw": 100_000})]
    nvml.set(4, **phases[-1][1], integrals=_history(phases))
    h = handle(4)
    a0 = time.monotonic()
    e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    a1 = time.monotonic()
    time.sleep(0.2)
    nvml.set(0, temperature_c=40)  # a rewrite of the state in between loses nothing
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h) >= e0
    time.sleep(0.3)
    b0 = time.monotonic()
    e1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    b1 = time.monotonic()
    # mW x s = mJ: 0.25 s at 300 W then 0.25 s at 100 W, as the history scheduled it
    bounds = [_mean(phases, "power_mw", a, b) * (b - a) for a in (a0, a1) for b in (b0, b1)]
    assert min(bounds) - 2 <= e1 - e0 <= max(bounds) + 2, (e1 - e0, bounds)
    nvml.set(5, energy_counter=False)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle(5))


def _product(index: int, product: str, **fields: object) -> dict[str, object]:
    """device() of that product, as keys for FakeNvml.set()."""
    return {k: v for k, v in device(index, product=product, **fields).items() if k != "index"}


def _power_fields(h) -> list[tuple[int, int]]:
    got = pynvml.nvmlDeviceGetFieldValues(
        h, [pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_FI_DEV_POWER_AVERAGE]
    )
    assert all(v.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT for v in got if v.nvmlReturn == 0)
    return [(v.nvmlReturn, v.value.uiVal) for v in got]


def test_power_fields_instant_and_one_second_mean(nvml: FakeNvml) -> None:
    t = time.monotonic()
    phases = [(t - 0.6, BUSY), (t - 0.2, IDLE)]
    nvml.set(5, **IDLE, integrals=_history(phases))
    (r_now, now), (r_avg, avg) = _power_fields(handle(5))
    assert (r_now, now) == (0, 100_000) and r_avg == 0 and 330_000 < avg < 380_000
    nvml.set(6, **_product(6, "A100"))  # GA100: no 1 s mean
    assert _power_fields(handle(6)) == [(0, 55_000), (pynvml.NVML_ERROR_NOT_SUPPORTED, 0)]
    nvml.set(6, power_fields=False)
    assert [r for r, _ in _power_fields(handle(6))] == [pynvml.NVML_ERROR_NOT_SUPPORTED] * 2


def _gpm(h, s1, s2, metric: int = 1) -> float:
    req = pynvml.c_nvmlGpmMetricsGet_t()
    req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    req.numMetrics = 1
    req.sample1, req.sample2 = s1, s2
    req.metrics[0].metricId = metric
    pynvml.nvmlGpmMetricsGet(req)
    assert req.metrics[0].nvmlReturn == 0
    return req.metrics[0].value


def test_gpm_graphics_util_and_the_100ms_floor(nvml: FakeNvml) -> None:
    t = time.monotonic()
    ahead = [(t - 0.5, BUSY), (t + 0.15, IDLE)]
    nvml.set(0, **IDLE, integrals=_history(ahead))
    h = handle(0)
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    try:
        a0 = time.monotonic()
        pynvml.nvmlGpmSampleGet(h, s1)
        a1 = time.monotonic()
        pynvml.nvmlGpmSampleGet(h, s2)
        with pytest.raises(pynvml.NVMLError_InvalidArgument):  # not more than 100 ms apart
            _gpm(h, s1, s2)
        time.sleep(0.3)
        b0 = time.monotonic()
        pynvml.nvmlGpmSampleGet(h, s2)
        b1 = time.monotonic()
        got = _gpm(h, s1, s2)  # NVML_GPM_METRIC_GRAPHICS_UTIL: the mean utilization between them
        bounds = [_mean(ahead, "utilization_gpu", a, b) for a in (a0, a1) for b in (b0, b1)]
        assert min(bounds) - 1e-6 <= got <= max(bounds) + 1e-6 and 20 < got < 60, (got, bounds)
        nvml.set(0, gpm_min_interval_seconds=0)  # a unit test that ticks back to back
        pynvml.nvmlGpmSampleGet(h, s1)
        pynvml.nvmlGpmSampleGet(h, s2)
        assert _gpm(h, s1, s2) == 0.0  # without integrals: the later sample's utilization
    finally:
        pynvml.nvmlGpmSampleFree(s1)
        pynvml.nvmlGpmSampleFree(s2)


@pytest.mark.parametrize(
    "product, averages_power, power_fields",
    [
        ("H100", True, [0, 0]),
        ("H200", True, [0, 0]),
        ("H20", True, [0, 0]),
        ("A100", False, [0, pynvml.NVML_ERROR_NOT_SUPPORTED]),
        ("A10", True, [0, 0]),
        ("L20", True, [0, 0]),
        ("T4", False, [0, pynvml.NVML_ERROR_NOT_SUPPORTED]),
    ],
)
def test_each_products_defaults_and_an_explicit_key_wins(
    nvml: FakeNvml, product: str, averages_power: bool, power_fields: list[int]
) -> None:
    t = time.monotonic()
    phases = [(t - 0.6, BUSY), (t - 0.2, IDLE)]
    dev = _product(7, product, power_mw=IDLE["power_mw"])  # GPM keys as the product has them
    nvml.set(7, **dev, integrals=_history(phases))
    h = handle(7)
    assert pynvml.nvmlDeviceGetName(h) == dev["name"]
    power = pynvml.nvmlDeviceGetPowerUsage(h)
    assert (power > 300_000) if averages_power else power == 100_000  # the 1 s mean, or the instant's
    assert [r for r, _ in _power_fields(h)] == power_fields
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h) >= 0  # Volta and later: every profile
    nvml.set(7, utilization_gpu=30, integrals=None)
    _, got = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    assert len(got) == 100  # 1/6 s x 100: the default buffer
    assert abs(time.time() * 1e6 - got[-1].timeStamp) < 200_000  # CLOCK_REALTIME
    assert pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == (product in ("H100", "H200", "H20"))
    nvml.set(7, power_average_seconds=0, sample_buffer_depth=7, integrals=_history(phases), utilization_gpu=0)
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 100_000  # 0: the instant's, whatever the product
    nvml.set(7, integrals=None, utilization_gpu=30)
    assert len(pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)[1]) == 7


def _link(h) -> tuple[int, int, int, int, int]:
    return (
        pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h),
        pynvml.nvmlDeviceGetCurrPcieLinkWidth(h),
        pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h),
        pynvml.nvmlDeviceGetMaxPcieLinkWidth(h),
        pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(h),
    )


def _nvlinks(h) -> list[int]:
    """NVLink state of each link that answers, from link 0 until the first that does not."""
    states = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            states.append(pynvml.nvmlDeviceGetNvLinkState(h, link))
        except pynvml.NVMLError_NotSupported:
            break
    return states


def test_pcie_link_nvlink_state_default_power_limit_and_max_clock(nvml: FakeNvml) -> None:
    h = handle(0)  # an H100 SXM5: Gen5 x16, 18 NVLinks, 700 W, 1980 MHz
    assert _link(h) == (5, 16, 5, 16, 5)
    assert _nvlinks(h) == [1] * 18
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # past NVML_NVLINK_MAX_LINKS
        pynvml.nvmlDeviceGetNvLinkState(h, pynvml.NVML_NVLINK_MAX_LINKS)
    assert pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) == 700_000
    assert pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM) == 1980
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)
    # trained down, two links down, the limit lowered: each from the state
    nvml.set(0, pcie_link_generation=3, pcie_link_width=8, nvlink_inactive=[2, 17], power_limit_mw=500_000)
    assert _link(h) == (3, 8, 5, 16, 5)
    assert [link for link, active in enumerate(_nvlinks(h)) if not active] == [2, 17]
    assert pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) == 700_000
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == 500_000
    nvml.set(0, pcie_link_width=None, sm_clock_max_mhz=None, unsupported=["nvmlDeviceGetNvLinkState"])
    for call in (pynvml.nvmlDeviceGetCurrPcieLinkWidth, lambda h: pynvml.nvmlDeviceGetMaxClockInfo(h, 1)):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call(h)
    assert _nvlinks(h) == []
    nvml.set_top(
        missing_functions=["nvmlDeviceGetPowerManagementDefaultLimit", "nvmlDeviceGetCurrPcieLinkGeneration"]
    )
    for call in (pynvml.nvmlDeviceGetPowerManagementDefaultLimit, pynvml.nvmlDeviceGetCurrPcieLinkGeneration):
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            call(h)


@pytest.mark.parametrize(
    ("product", "link", "nvlinks", "default_mw", "max_mhz"),
    [
        ("H200", (5, 16, 5, 16, 5), 18, 700_000, 1980),
        ("A100", (4, 16, 4, 16, 4), 12, 400_000, 1410),
        ("A10", (4, 16, 4, 16, 4), 0, 150_000, 1695),
        ("L20", (4, 16, 4, 16, 4), 0, 350_000, 2520),
        ("T4", (3, 16, 3, 16, 3), 0, 70_000, 1590),
    ],
)
def test_link_and_limits_follow_the_product_when_the_state_omits_them(
    nvml: FakeNvml, product: str, link: tuple, nvlinks: int, default_mw: int, max_mhz: int
) -> None:
    """The C profile's defaults, with a state that names only the product (as a hand-written one would);
    device() writes the same values."""
    name = PRODUCTS[product].name
    write_state(nvml.path, {"devices": [{"name": name}]})
    h = handle(0)
    assert _link(h) == link
    assert len(_nvlinks(h)) == nvlinks
    if not nvlinks:  # a PCIe card: no NVLink at all, link 0 included
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetNvLinkState(h, 0)
    assert pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) == default_mw
    assert pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM) == max_mhz
    written = device(0, product=product)
    assert (written["nvlink_links"] or 0, written["power_default_limit_mw"], written["sm_clock_max_mhz"]) == (
        nvlinks,
        default_mw,
        max_mhz,
    )
    assert written["pcie_link_generation_max"] == link[2]
