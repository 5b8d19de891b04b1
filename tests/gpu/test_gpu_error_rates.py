"""Corrected ECC errors and NVLink error counters: the fake's answers through nvidia-ml-py, the
collector's figures on /metrics and in the status, the rate over a window (pure), and the
ecc-corrected-rising / nvlink-errors faults raised after their hold and cleared when the rate falls."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest
from gpu_fixtures import fake_nvml, fake_nvml_library, nvml  # noqa: F401
from test_gpu_health import Run, brief, g

from agent.devtools.fake_nvml import FakeNvml, device, write_state
from agent.faults.rising import RisingCount
from agent.snapshot import NodeSnapshot
from agent.sources.gpu import metrics, slow
from agent.sources.gpu.collector import GpuCollector
from agent.sources.gpu.part import NvlinkCounter
from agent.sources.gpu.rates import GpuRates
from agent.sources.gpu.status import summary

TOTALS = (
    pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
    pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
    pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
    pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
)


@pytest.fixture
def gpus(
    fake_nvml: FakeNvml, fake_nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[GpuCollector]:
    monkeypatch.setattr(slow, "SLOW_SECONDS", 0.0)  # the ECC counts at every tick
    c = GpuCollector(library=str(fake_nvml_library), xid_events=False)
    yield c
    c.close()


# --- the fake ----------------------------------------------------------------------------------------


def test_the_fake_answers_corrected_ecc_and_nvlink_error_totals(nvml: FakeNvml) -> None:
    nvml.set(2, ecc_corrected=41, nvlink_crc_flit_errors=7, nvlink_crc_data_errors=3, nvlink_replay_errors=2,
             nvlink_recovery_errors=1)  # fmt: skip
    h = pynvml.nvmlDeviceGetHandleByIndex(2)
    for counter in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC):
        assert pynvml.nvmlDeviceGetTotalEccErrors(h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, counter) == 41
    fv = pynvml.nvmlDeviceGetFieldValues(h, [(f, 0) for f in TOTALS] + [(TOTALS[2], 5)])  # scopeId ignored
    assert [v.nvmlReturn for v in fv] == [0] * 5
    assert [v.value.ullVal for v in fv] == [7, 3, 2, 1, 2]
    nvml.set(2, nvlink_recovery_errors=None)  # null: that counter alone is not supported
    fv = pynvml.nvmlDeviceGetFieldValues(h, [(f, 0) for f in TOTALS])
    assert [v.nvmlReturn for v in fv] == [0, 0, 0, pynvml.NVML_ERROR_NOT_SUPPORTED]
    nvml.set(2, ecc_uncorrected=None)  # ECC off: neither count
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetTotalEccErrors(
            h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC
        )


def test_a_pcie_card_has_no_nvlink_error_counters(nvml: FakeNvml) -> None:
    """The C default (a state naming only the product) and device()'s agree: 0 with NVLink, else none."""
    write_state(nvml.path, {"devices": [{"name": "NVIDIA A10"}, {"name": "NVIDIA A100-SXM4-80GB"}]})
    a10, a100 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    assert {v.nvmlReturn for v in pynvml.nvmlDeviceGetFieldValues(a10, [(f, 0) for f in TOTALS])} == {
        pynvml.NVML_ERROR_NOT_SUPPORTED
    }
    assert [v.value.ullVal for v in pynvml.nvmlDeviceGetFieldValues(a100, [(f, 0) for f in TOTALS])] == [
        0
    ] * 4
    assert device(0, "A10")["nvlink_replay_errors"] is None and device(0, "A100")["nvlink_replay_errors"] == 0


# --- the collector's figures ----------------------------------------------------------------------------


def test_the_counts_reach_metrics_and_status(fake_nvml: FakeNvml, gpus: GpuCollector) -> None:
    fake_nvml.set(1, ecc_corrected=12, nvlink_crc_flit_errors=9, nvlink_replay_errors=4)
    fake_nvml.set(2, ecc_uncorrected=None, nvlink_crc_flit_errors=None, nvlink_crc_data_errors=None,
                  nvlink_replay_errors=None, nvlink_recovery_errors=None)  # fmt: skip
    part = gpus.collect()
    one, two = part.gpus[1], part.gpus[2]
    assert one.ecc_corrected_total == 12
    assert one.nvlink_errors == {
        NvlinkCounter.CRC_FLIT: 9,
        NvlinkCounter.CRC_DATA: 0,
        NvlinkCounter.REPLAY: 4,
        NvlinkCounter.RECOVERY: 0,
    }
    assert two.ecc_corrected_total is None and two.nvlink_errors == {}  # not supported: no value, not 0
    snap = NodeSnapshot(seq=1, timestamp=0.0, monotonic=0.0, parts={"gpu": part})
    samples = {
        (s.name, s.labels.get("gpu"), s.labels.get("counter")): s.value
        for fam in metrics.render(snap)
        for s in fam.samples
    }
    assert samples[("training_node_gpu_ecc_corrected_errors_total", "1", None)] == 12
    assert ("training_node_gpu_ecc_corrected_errors_total", "2", None) not in samples
    assert samples[("training_node_gpu_nvlink_errors_total", "1", "replay")] == 4
    assert samples[("training_node_gpu_nvlink_errors_total", "1", "crc_flit")] == 9
    assert not [k for k in samples if k[0] == "training_node_gpu_nvlink_errors_total" and k[1] == "2"]
    status = summary(part, GpuRates())["gpus"]
    assert status[1]["ecc_corrected_total"] == 12
    assert status[1]["nvlink_errors"] == {"crc_flit": 9, "crc_data": 0, "replay": 4, "recovery": 0}
    assert status[2]["ecc_corrected_total"] is None and status[2]["nvlink_errors"] == {}
    # not asked again once NotSupported: a later value is not read
    fake_nvml.set(2, ecc_uncorrected=0, ecc_corrected=5, nvlink_replay_errors=3)
    again = gpus.collect().gpus[2]
    assert again.ecc_corrected_total is None and again.nvlink_errors == {}


# --- the rate over a window (pure) -----------------------------------------------------------------------


def _rising(window: float = 600.0, per_hour: float = 60.0) -> RisingCount:
    return RisingCount(lambda s: s.ecc_corrected_total, "corrected ECC errors", window, per_hour)


def test_the_rise_is_counted_over_the_window_and_divided_by_all_of_it() -> None:
    r = _rising()
    r.observe(g(0, ecc_corrected_total=100), 0.0)
    r.observe(g(0, ecc_corrected_total=105), 5.0)
    assert r.rise(0) == 5 and r.per_hour_now(0) == 30.0  # 5 in 5 s: a lower bound, not 3600/h
    assert r.condition(g(0)) is None
    for t in range(10, 601, 10):  # one more error every 10 s
        r.observe(g(0, ecc_corrected_total=105 + t // 10), float(t))
    assert r.rise(0) == 65  # from the read at 0 s, which starts the window
    assert r.condition(g(0)) == "65 corrected ECC errors in 10m (390/h, above 60/h)"
    r.observe(g(0, ecc_corrected_total=165), 1200.0)  # silent for ten minutes: the window holds none
    assert r.rise(0) == 0 and r.condition(g(0)) is None


def test_a_reset_or_a_missing_count_never_makes_a_negative_rate() -> None:
    r = _rising()
    r.observe(g(0, ecc_corrected_total=500), 0.0)
    r.observe(g(0, ecc_corrected_total=3), 10.0)  # a driver reload: the volatile count starts over
    assert r.rise(0) == 0
    r.observe(g(0, ecc_corrected_total=4), 20.0)
    assert r.rise(0) == 1
    r.observe(g(0, ecc_corrected_total=None), 30.0)  # not supported now: nothing to say
    assert r.rise(0) is None and r.per_hour_now(0) is None and r.condition(g(0)) is None
    r.observe(g(0, up=False, ecc_corrected_total=9), 40.0)  # a lost GPU's stale figure is no reading
    assert r.rise(0) is None
    r.observe(g(1, ecc_corrected_total=0), 40.0)  # each GPU its own
    assert r.rise(1) == 0 and r.rise(0) is None


# --- the faults, end to end on the fake ---------------------------------------------------------------


def test_corrected_ecc_and_nvlink_errors_rising_raise_after_their_hold_and_clear(
    tmp_path: Path, fake_nvml: FakeNvml, gpus: GpuCollector
) -> None:
    run = Run(tmp_path, error_rate_window="10m", ecc_corrected_per_hour=60, ecc_corrected_hold="2m",
              nvlink_errors_per_hour=30, nvlink_errors_hold="1m")  # fmt: skip

    def tick(at: float) -> list[tuple]:
        return brief(run.tick(at, *gpus.collect().gpus))

    assert tick(0) == []
    fake_nvml.set(4, ecc_corrected=12)  # 12 in the window: 72/h
    fake_nvml.set(6, nvlink_replay_errors=5, nvlink_recovery_errors=1)  # 6: 36/h
    fake_nvml.set(5, nvlink_crc_flit_errors=10_000, nvlink_crc_data_errors=500)  # CRC alone: replays fix it
    assert tick(60) == []
    assert tick(120) == [("nvlink-errors", 6, None, False)]
    assert tick(180) == [("ecc-corrected-rising", 4, None, False)]
    degraded = {d["fault"]: d["evidence"] for d in run.health.status()["degraded"]}
    assert degraded == {
        "ecc-corrected-rising": "12 corrected ECC errors in 10m (72/h, above 60/h)",
        "nvlink-errors": "6 NVLink replays and recoveries in 10m (36/h, above 30/h)",
    }
    assert (
        "GPU 6: nvlink-errors: 6 NVLink replays and recoveries in 10m (36/h, above 30/h)"
        in (run.health.status()["lines"])
    )
    assert tick(600) == []  # the reads at 0 s still start the window
    fake_nvml.set(4, ecc_corrected=2)  # a driver reload: the count starts over, no negative rate
    assert tick(620) == [("ecc-corrected-rising", 4, None, True)]
    assert tick(660) == [("nvlink-errors", 6, None, True)]  # the errors of 60 s left the window
    assert run.health.status()["degraded"] == []
    assert run.health.published["nvlink-errors-cleared"] == 1
