"""GpuCollector over the fake NVML through nvidia-ml-py: values and units, Xid counting, lost GPUs,
functions a driver cannot answer, driver errors with re-init, and absence."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import wait_until
from gpu_fixtures import collected, fake_nvml, fake_nvml_library  # noqa: F401
from structlog.testing import capture_logs

from agent.devtools.fake_nvml import FakeNvml, device, write_state
from agent.sources import SourceAbsent
from agent.sources.gpu import binding, slow
from agent.sources.gpu.collector import GpuCollector
from agent.sources.gpu.nvml import NvmlDriverError
from agent.sources.gpu.part import GpuPart


@pytest.fixture
def make_collector(fake_nvml_library: Path) -> Iterator[Callable[..., GpuCollector]]:
    made: list[GpuCollector] = []

    def make(**kw: object) -> GpuCollector:
        c = GpuCollector(library=str(fake_nvml_library), **kw)  # type: ignore[arg-type]
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def test_values_and_units(fake_nvml: FakeNvml, make_collector) -> None:
    fake_nvml.set(
        2,
        utilization_gpu=93,
        utilization_memory=58,
        memory_used_bytes=61_000_000_000,
        power_mw=655_500,
        power_limit_mw=700_000,
        temperature_c=74,
        sm_clock_mhz=1830,
        clocks_event_reasons=0x4,
        pcie_tx_bytes=1_000,
        pcie_rx_bytes=2_000,
        nvlink_tx_kib=3,
        nvlink_rx_kib=4,
        sm_active=81.0,
        tensor_active=47.5,
        dram_active=66.0,
        ecc_uncorrected=2,
        processes=[{"pid": 31337, "used_memory_bytes": 60_000_000_000}],
    )
    c = make_collector()
    # GPM needs two samples (more than 100 ms apart): nothing on the first tick. The buffer and the
    # energy counter too report between two reads
    first = c.collect().gpus[2]
    assert first.sm_active is None and first.tensor_active is None
    time.sleep(0.15)
    part = c.collect()
    assert isinstance(part, GpuPart)
    assert (part.driver_version, part.nvml_version) == ("550.90.07", "12.550.90.07")
    assert [g.index for g in part.gpus] == list(range(8))
    g = part.gpus[2]
    assert g.uuid == fake_nvml.device(2)["uuid"] and g.model == "NVIDIA H100 80GB HBM3" and g.up
    assert g.pci_bus_id == "00000000:3A:00.0"
    # the buffer's time-weighted share; power the energy counter's mean (whole millijoules)
    assert (g.utilization, g.memory_utilization) == (pytest.approx(0.93, abs=0.005), 0.58)
    assert (g.memory_used_bytes, g.memory_total_bytes) == (61_000_000_000, 80 * 1024**3)
    assert (g.power_watts, g.power_limit_watts, g.temperature_celsius) == (
        pytest.approx(655.5, abs=0.1),
        700.0,
        74.0,
    )
    assert g.sm_clock_hertz == 1.83e9 and g.clocks_event_reasons == 0x4
    assert (g.pcie_tx_bytes, g.pcie_rx_bytes) == (1_000, 2_000)
    assert (g.nvlink_tx_bytes, g.nvlink_rx_bytes) == (3 * 1024, 4 * 1024)  # the field counts KiB
    assert g.ecc_uncorrected_total == 2 and g.row_remap_failure is False
    assert [(p.pid, p.used_memory_bytes) for p in g.processes] == [(31337, 60_000_000_000)]
    assert (g.sm_active, g.tensor_active, g.dram_active) == (0.81, 0.475, 0.66)
    assert part.gpus[0].utilization == 0.0 and part.gpus[0].processes == ()


def test_state_changes_are_picked_up(fake_nvml: FakeNvml, make_collector) -> None:
    c = make_collector()
    assert c.collect().gpus[5].power_watts == 70.0
    fake_nvml.set(5, power_mw=400_000, pcie_rx_bytes=10**12)
    g = c.collect().gpus[5]
    assert (g.power_watts, g.pcie_rx_bytes) == (pytest.approx(400.0, abs=0.1), 10**12)


def test_more_processes_than_the_rows_asked_for_and_one_without_a_memory_figure(
    fake_nvml: FakeNvml, make_collector
) -> None:
    """The processes are read in one call into rows made once (binding.PROCESS_ROOM); a GPU with
    more gets rows for them all, and a process the driver gives no memory for has None, as pynvml
    gives (WDDM's NVML_VALUE_NOT_AVAILABLE)."""
    many = [{"pid": 1000 + i, "used_memory_bytes": (i + 1) * 2**30} for i in range(binding.PROCESS_ROOM + 5)]
    fake_nvml.set(1, processes=[*many, {"pid": 4242}])
    c = make_collector()
    for _ in range(2):  # the first tick grows the rows, the second reads into them
        got = c.collect().gpus[1].processes
        assert [(p.pid, p.used_memory_bytes) for p in got] == [
            *((p["pid"], p["used_memory_bytes"]) for p in many),
            (4242, None),
        ]
    fake_nvml.set(1, processes=[])
    assert c.collect().gpus[1].processes == ()


def test_rarely_changing_values_are_read_every_few_seconds_and_after_an_xid(
    fake_nvml: FakeNvml, make_collector, monkeypatch
) -> None:
    """The power limit, the ECC count and row remapping are read every SLOW_SECONDS, not every tick,
    and at the next tick after an Xid on that GPU; everything else every tick."""
    monkeypatch.setattr(slow, "SLOW_SECONDS", 3600.0)
    c = make_collector()
    c.collect()
    fake_nvml.set(4, ecc_uncorrected=7, power_limit_mw=500_000, row_remap_failure=True, power_mw=300_000)
    fake_nvml.set(5, ecc_uncorrected=3)
    g = c.collect().gpus[4]
    assert g.power_watts == pytest.approx(300.0, abs=0.1)
    assert (g.ecc_uncorrected_total, g.power_limit_watts, g.row_remap_failure) == (0, 700.0, False)
    fake_nvml.add_xid(4, 48)  # a double-bit ECC error
    wait_until(lambda: c.collect().gpus[4].xid_counts == {48: 1}, 5.0)
    part = c.collect()
    g = part.gpus[4]
    assert (g.ecc_uncorrected_total, g.power_limit_watts, g.row_remap_failure) == (7, 500.0, True)
    assert part.gpus[5].ecc_uncorrected_total == 0  # no Xid there: read at its own time
    monkeypatch.setattr(slow, "SLOW_SECONDS", 0.2)
    again = make_collector()
    again.collect()
    fake_nvml.set(6, ecc_uncorrected=9)
    wait_until(lambda: again.collect().gpus[6].ecc_uncorrected_total == 9, 5.0)


def test_nvlink_states_are_read_every_link_seconds_and_after_an_xid(
    fake_nvml: FakeNvml, make_collector, monkeypatch
) -> None:
    """Each link's state is a call of its own (18 on an H100): read every LINK_SECONDS, not with
    every slow read, and at the next tick after an Xid on that GPU (an NVLink error raises one)."""
    monkeypatch.setattr(slow, "SLOW_SECONDS", 0.0)
    monkeypatch.setattr(slow, "LINK_SECONDS", 3600.0)
    c = make_collector()
    assert c.collect().gpus[2].nvlink_links_active == 18
    fake_nvml.set(2, nvlink_inactive=[3, 4], power_limit_mw=500_000)
    fake_nvml.set(3, nvlink_inactive=[0])
    g = c.collect().gpus[2]
    assert (g.nvlink_links_active, g.power_limit_watts) == (18, 500.0)  # the other slow reads: read
    fake_nvml.add_xid(2, 74)  # an NVLink error
    wait_until(lambda: c.collect().gpus[2].xid_counts == {74: 1}, 5.0)
    part = c.collect()
    assert part.gpus[2].nvlink_links_active == 16
    assert part.gpus[3].nvlink_links_active == 18  # no Xid there: read at its own time
    monkeypatch.setattr(slow, "LINK_SECONDS", 0.2)
    again = make_collector()
    again.collect()
    fake_nvml.set(5, nvlink_inactive=[1])
    wait_until(lambda: again.collect().gpus[5].nvlink_links_active == 17, 5.0)


def test_xid_counted_once_per_event(fake_nvml: FakeNvml, make_collector) -> None:
    c = make_collector()
    c.collect()
    fake_nvml.add_xid(1, 79)
    fake_nvml.add_xid(1, 79)
    fake_nvml.add_xid(6, 48)
    wait_until(lambda: c.collect().gpus[1].xid_counts == {79: 2}, 5.0)
    for _ in range(5):  # later ticks and file rewrites never count them again
        fake_nvml.set(0, temperature_c=40)
        part = c.collect()
        time.sleep(0.05)
    assert part.gpus[1].xid_counts == {79: 2}
    assert part.gpus[6].xid_counts == {48: 1}
    assert part.gpus[0].xid_counts == {}


def test_lost_gpu_is_a_state_and_the_others_keep_reporting(fake_nvml: FakeNvml, make_collector) -> None:
    c = make_collector()
    c.collect()
    fake_nvml.set(3, lost=True)
    part = c.collect()
    lost = part.gpus[3]
    assert not lost.up and lost.uuid == fake_nvml.device(3)["uuid"]  # identity kept from before
    assert lost.power_watts is None and lost.utilization is None
    assert all(g.up and g.power_watts == pytest.approx(70.0, abs=0.1) for g in part.gpus if g.index != 3)
    fake_nvml.set(3, lost=False)
    assert wait_until(lambda: c.collect().gpus[3].up, timeout=10)  # probed again with backoff


def test_gpu_lost_before_the_agent_started(fake_nvml: FakeNvml, make_collector) -> None:
    fake_nvml.set(0, lost=True)
    c = make_collector()
    part = c.collect()
    assert not part.gpus[0].up and part.gpus[0].uuid == ""
    assert all(g.up for g in part.gpus[1:])
    fake_nvml.add_xid(0, 79)  # Xid 79: fallen off the bus
    fake_nvml.set(0, lost=False)
    back = wait_until(lambda: (g := c.collect().gpus[0]).up and g.xid_counts and g, timeout=10)
    assert back.uuid == fake_nvml.device(0)["uuid"] and back.model == "NVIDIA H100 80GB HBM3"
    assert back.xid_counts == {79: 1} and back.power_watts == pytest.approx(70.0, abs=0.1)


def test_unsupported_function_is_skipped_and_logged_once(fake_nvml: FakeNvml, make_collector) -> None:
    fake_nvml.set(4, unsupported=["nvmlDeviceGetPowerUsage"], nvlink_tx_kib=None, nvlink_rx_kib=None)
    c = make_collector()
    with capture_logs() as logs:
        for _ in range(10):
            part = c.collect()
    g = part.gpus[4]
    assert g.power_watts is None and g.nvlink_tx_bytes is None and g.nvlink_rx_bytes is None
    assert g.power_limit_watts == 700.0 and g.pcie_rx_bytes == 0  # the rest of that GPU is unaffected
    assert part.gpus[5].power_watts == 70.0 and part.gpus[5].nvlink_tx_bytes == 0
    skipped = [e for e in logs if e["event"].startswith("NVML function not supported")]
    assert sorted(e["function"] for e in skipped) == ["field 138", "field 139", "nvmlDeviceGetPowerUsage"]
    assert all(e["gpu"] == 4 for e in skipped)


def test_missing_function_is_skipped_for_every_gpu_and_logged_once(
    fake_nvml: FakeNvml, make_collector
) -> None:
    fake_nvml.set_top(
        missing_functions=[
            "nvmlDeviceGetFieldValues",
            "nvmlGpmSampleGet",
            "nvmlDeviceGetCurrentClocksEventReasons",
        ]
    )
    fake_nvml.set(0, clocks_event_reasons=0x40)
    c = make_collector()
    with capture_logs() as logs:
        for _ in range(5):
            part = c.collect()
    assert all(g.up and g.pcie_tx_bytes is None and g.sm_active is None for g in part.gpus)
    assert part.gpus[0].temperature_celsius == 32.0
    assert part.gpus[0].clocks_event_reasons == 0x40  # from the deprecated ThrottleReasons name
    missing = [e["function"] for e in logs if e["event"].startswith("NVML function missing")]
    assert sorted(missing) == [
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetFieldValues",
        "nvmlGpmSampleGet",
    ]


def test_driver_error_reinitialises_with_backoff(fake_nvml: FakeNvml, make_collector) -> None:
    c = make_collector(reinit_backoff_max=0.2)
    assert len(c.collect().gpus) == 8
    fake_nvml.set_top(driver_error="UNKNOWN")
    with pytest.raises(NvmlDriverError, match="Unknown Error"):
        c.collect()
    with pytest.raises(NvmlDriverError):  # still broken: the re-init fails too
        time.sleep(0.25)
        c.collect()
    fake_nvml.set_top(driver_error="DRIVER_NOT_LOADED")  # gone after we saw GPUs: a failure, not absence
    with pytest.raises(NvmlDriverError, match="this node had 8 GPUs"):
        time.sleep(0.25)
        c.collect()
    fake_nvml.set_top(driver_error=None)
    part = wait_until(lambda: collected(c), 5.0)
    assert len(part.gpus) == 8 and all(g.up for g in part.gpus)


def test_absent_without_library_driver_or_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_nvml_library: Path
) -> None:
    with pytest.raises(SourceAbsent, match="no NVML library"):
        GpuCollector(library=str(tmp_path / "libnvidia-ml.so.1")).collect()
    monkeypatch.delenv("FAKE_NVML_STATE", raising=False)
    c = GpuCollector(library=str(fake_nvml_library), reinit_backoff_max=0.1)
    with pytest.raises(SourceAbsent, match="Driver Not Loaded"):
        c.collect()
    state = tmp_path / "none.json"
    write_state(state, {"devices": []})
    monkeypatch.setenv("FAKE_NVML_STATE", str(state))
    time.sleep(0.15)
    with pytest.raises(SourceAbsent, match="no GPU"):
        c.collect()
    write_state(state, {"devices": [device(0)]})  # a driver installed later is found
    time.sleep(0.15)
    assert len(c.collect().gpus) == 1
    c.close()


def test_close_stops_the_xid_thread(fake_nvml: FakeNvml, make_collector) -> None:
    c = make_collector()
    c.collect()
    assert any(t.name == "nvml-xid" for t in threading.enumerate())
    c.close()
    assert not any(t.name == "nvml-xid" and t.is_alive() for t in threading.enumerate())
