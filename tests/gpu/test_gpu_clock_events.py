"""Time under each clocks event reason: the fake's counters (its reason bits integrated as they hold,
also between two writes of its state), the share of a tick from the counters' deltas (pure), and the
collector preferring them over the bits it samples, on /metrics and in the status."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import time
from pathlib import Path

import pynvml
import pytest
from gpu_fixtures import fake_nvml, fake_nvml_library, nvml  # noqa: F401

from agent.devtools.fake_nvml import FakeNvml, device, write_state
from agent.snapshot import NodeSnapshot
from agent.sources.gpu import metrics
from agent.sources.gpu.clock_events import FIELDS, Counted, read, shares
from agent.sources.gpu.collector import GpuCollector
from agent.sources.gpu.part import GpuReadingSource as Src
from agent.sources.gpu.rates import GpuRates
from agent.sources.gpu.reasons import ClockReason as R
from agent.sources.gpu.status import lines, summary

IDS = [fid for _, fid in FIELDS]
HW_THERMAL = int(R.HW_THERMAL_SLOWDOWN)


def _seconds(index: int) -> dict[int, float]:
    got = pynvml.nvmlDeviceGetFieldValues(pynvml.nvmlDeviceGetHandleByIndex(index), [(f, 0) for f in IDS])
    assert [v.nvmlReturn for v in got] == [0] * len(IDS)
    return {fid: v.value.ullVal / 1e9 for fid, v in zip(IDS, got, strict=True)}


def test_the_field_ids_are_nvidia_ml_py_13s() -> None:
    """74 and 76 alias the PERF_POLICY counters; the other three moved between headers (251-253 in
    some): the ones read are the binding's own."""
    assert IDS == [74, 76, 269, 270, 271]
    assert pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP == pynvml.NVML_FI_DEV_PERF_POLICY_POWER


# --- the fake --------------------------------------------------------------------------------------------


def test_the_fake_counts_the_time_each_bit_holds_also_between_writes(nvml: FakeNvml) -> None:
    """Each count is held to the time that really passed, measured around the calls: beside other
    tests a 0.3 s sleep and a state write may take twice that (a clean clone's run counted 0.65 s
    for a nominal 0.3 s between two writes)."""
    hw = IDS[3]
    nvml.set(3, clocks_event_reasons=HW_THERMAL | int(R.SW_POWER_CAP))
    t0 = time.monotonic()
    start = _seconds(3)
    t1 = time.monotonic()
    time.sleep(0.3)
    t2 = time.monotonic()
    mid = _seconds(3)  # no write since: the bits held all along
    t3 = time.monotonic()
    assert t2 - t1 - 0.01 <= mid[hw] - start[hw] <= t3 - t0 + 0.01
    assert mid[IDS[0]] - start[IDS[0]] == pytest.approx(mid[hw] - start[hw], abs=0.01)
    assert mid[IDS[1]] == mid[IDS[2]] == mid[IDS[4]] == 0.0
    nvml.set(3, clocks_event_reasons=0)  # written now, noticed only at the next read
    t4 = time.monotonic()
    time.sleep(0.3)
    end = _seconds(3)
    # counted up to the write, not up to the read 0.3 s after it
    assert 0 <= end[hw] - mid[hw] <= t4 - t2 + 0.01
    # a slowdown written and over again before anyone read: the writer's count carries it
    t5 = time.monotonic()
    nvml.set(3, clocks_event_reasons=HW_THERMAL)
    t6 = time.monotonic()
    time.sleep(0.3)
    t7 = time.monotonic()
    nvml.set(3, clocks_event_reasons=0)
    t8 = time.monotonic()
    assert t7 - t6 - 0.01 <= _seconds(3)[hw] - end[hw] <= t8 - t5 + 0.01


def test_without_the_writers_count_the_fake_integrates_the_states_it_loads(nvml: FakeNvml) -> None:
    """A hand-written state (no clocks_event_seconds): the bits of each state the fake loaded, up to
    the moment the next was written."""
    hw = IDS[3]
    write_state(
        nvml.path, {"devices": [{"name": "NVIDIA H100 80GB HBM3", "clocks_event_reasons": HW_THERMAL}]}
    )
    t0 = time.monotonic()
    start = _seconds(0)
    t1 = time.monotonic()
    time.sleep(0.3)
    t2 = time.monotonic()
    mid = _seconds(0)
    assert t2 - t1 - 0.01 <= mid[hw] - start[hw] <= time.monotonic() - t0 + 0.01 and mid[IDS[0]] == 0.0
    write_state(nvml.path, {"devices": [{"name": "NVIDIA H100 80GB HBM3", "clocks_event_reasons": 0}]})
    t3 = time.monotonic()
    time.sleep(0.3)
    assert 0 <= _seconds(0)[hw] - mid[hw] <= t3 - t2 + 0.01  # up to the write, not the read after it


def test_gpus_before_hopper_and_a_state_that_says_so_have_no_counters(nvml: FakeNvml) -> None:
    nvml.set(1, clocks_event_counters=False)
    got = pynvml.nvmlDeviceGetFieldValues(pynvml.nvmlDeviceGetHandleByIndex(1), [(f, 0) for f in IDS])
    assert {v.nvmlReturn for v in got} == {pynvml.NVML_ERROR_NOT_SUPPORTED}
    assert device(0, "A100")["clocks_event_counters"] is False and device(0, "H100")["clocks_event_counters"]


# --- the share of a tick (pure) -----------------------------------------------------------------------------


def _counted(at: float, **ns: int) -> Counted:
    values = dict.fromkeys((r for r, _ in FIELDS), 0)
    values.update({R[k.upper()]: v for k, v in ns.items()})
    return Counted(values, at)


def test_shares_come_from_the_counters_deltas() -> None:
    prev = _counted(10.0, hw_thermal_slowdown=5_000_000_000, sw_power_cap=1)
    cur = _counted(11.0, hw_thermal_slowdown=5_250_000_000, sw_power_cap=1_000_000_001)
    got, source = shares(prev, cur, bits=0)  # the bits at the tick say nothing held: the counters know
    assert source is Src.COUNTERS
    assert got[R.HW_THERMAL_SLOWDOWN] == pytest.approx(0.25)
    assert got[R.SW_POWER_CAP] == pytest.approx(1.0)
    assert got[R.SYNC_BOOST] == 0.0


@pytest.mark.parametrize(
    ("prev", "cur", "why"),
    [
        (None, _counted(1.0), "the first read: no delta yet"),
        (_counted(1.0, sync_boost=9), _counted(2.0, sync_boost=3), "a counter went back (a driver reload)"),
        (_counted(1.0), None, "the GPU does not count every reason"),
        (_counted(1.0), _counted(1.0), "no time between the reads"),
    ],
)
def test_shares_fall_back_to_the_bits(prev: Counted | None, cur: Counted | None, why: str) -> None:
    got, source = shares(prev, cur, bits=HW_THERMAL)
    assert source is Src.BITS, why
    assert got[R.HW_THERMAL_SLOWDOWN] == 1.0 and got[R.SW_THERMAL_SLOWDOWN] == 0.0
    assert shares(prev, cur, bits=None) == ({}, Src.NONE)


def test_a_gpu_counting_some_reasons_only_is_read_from_its_bits() -> None:
    assert read({R.SW_POWER_CAP: 1, R.SYNC_BOOST: 2}, 1.0) is None
    assert read(dict.fromkeys((r for r, _ in FIELDS), 0), 1.0) is not None


# --- the collector ---------------------------------------------------------------------------------------


def test_a_slowdown_between_two_ticks_is_seen_by_the_counters_not_the_bits(
    fake_nvml: FakeNvml, fake_nvml_library: Path
) -> None:
    fake_nvml.set(2, clocks_event_counters=False)  # this one samples its bits
    c = GpuCollector(library=str(fake_nvml_library), xid_events=False)
    try:
        first = c.collect()
        assert first.gpus[0].clocks_event_source is Src.BITS  # the first read has no delta
        for i in (0, 2):  # a HW thermal slowdown of ~0.3 s, over before the next tick
            fake_nvml.set(i, clocks_event_reasons=HW_THERMAL)
        time.sleep(0.3)
        for i in (0, 2):
            fake_nvml.set(i, clocks_event_reasons=0)
        time.sleep(0.3)
        part = c.collect()
    finally:
        c.close()
    counted, sampled = part.gpus[0], part.gpus[2]
    assert counted.clocks_event_source is Src.COUNTERS
    assert 0.3 <= counted.clocks_event_share[R.HW_THERMAL_SLOWDOWN] <= 0.7
    assert counted.clocks_event_share[R.SW_POWER_CAP] == 0.0
    assert sampled.clocks_event_source is Src.BITS  # the bits at the tick: it never happened
    assert sampled.clocks_event_share[R.HW_THERMAL_SLOWDOWN] == 0.0 and sampled.clocks_event_ns == {}
    snap = NodeSnapshot(seq=1, timestamp=0.0, monotonic=0.0, parts={"gpu": part})
    fams = {fam.name: fam for fam in metrics.render(snap)}
    seconds = {
        (s.labels["gpu"], s.labels["reason"]): s.value
        for s in fams["training_node_gpu_clocks_event_seconds"].samples
    }
    assert 0.25 <= seconds[("0", "hw_thermal_slowdown")] <= 1.0
    assert seconds[("0", "sync_boost")] == 0.0 and ("2", "hw_thermal_slowdown") not in seconds
    info = {s.labels["gpu"]: s.labels["clocks_event_source"] for s in fams["training_node_gpu"].samples}
    assert (info["0"], info["2"]) == ("counters", "bits")
    status = summary(part, GpuRates())
    gpu0 = status["gpus"][0]
    assert gpu0["readings"]["clocks_events"] == "counters"
    assert set(gpu0["clocks_event_share"]) == {r.label for r, _ in FIELDS}
    shown = lines(status)
    assert "clock events from counters" in shown[1] and "clock events from bits" in shown[3]
