"""GpuHealth on snapshot sequences: which GpuFaultEvents a run of snapshots raises, and when."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from gpu_fixtures import fake_nvml, fake_nvml_library  # noqa: F401

from agent.config import parse_config
from agent.context import Context
from agent.core.events import EventBus, GpuFaultEvent
from agent.devtools.fake_nvml import FakeNvml
from agent.faults.gpu import GpuHealth
from agent.snapshot import CollectorStatus, NodeSnapshot
from agent.sources.gpu import slow
from agent.sources.gpu.collector import GpuCollector
from agent.sources.gpu.kmsg import KernelXid, parse_xid
from agent.sources.gpu.part import GpuPart, GpuStats


class Run:
    """Feeds snapshots to a GpuHealth through the listener list it registered on, like the sampler."""

    def __init__(self, tmp_path: Path, **gpu_cfg: object) -> None:
        self.bus = EventBus()
        self.queue: asyncio.Queue = self.bus.subscribe("test", (GpuFaultEvent,))
        self.listeners: list = []
        ctx = Context(
            cfg=parse_config({"gpu": gpu_cfg}),
            bus=self.bus,
            latest=lambda: NodeSnapshot(seq=0, timestamp=0.0, monotonic=0.0),
            state_dir=tmp_path,
            runtime_dir=tmp_path,
            snapshot_listeners=self.listeners,
        )
        self.health = GpuHealth(ctx)
        self.seq = 0

    def tick(self, at: float, *gpus: GpuStats | None) -> list[GpuFaultEvent]:
        self.seq += 1
        part = None if gpus == (None,) else GpuPart("550", "12", tuple(g for g in gpus if g))
        snap = NodeSnapshot(seq=self.seq, timestamp=at, monotonic=at, gpu=part)
        for listener in self.listeners:
            listener(snap)
        out = []
        while not self.queue.empty():
            out.append(self.queue.get_nowait())
        return out


def g(index: int = 0, up: bool = True, **kw: object) -> GpuStats:
    return GpuStats(index, f"GPU-{index}", "H100", up, **kw)  # type: ignore[arg-type]


def brief(events: list[GpuFaultEvent]) -> list[tuple]:
    return [(e.fault, e.gpu, e.xid, e.cleared) for e in events]


def test_new_xid_errors_raise_one_event_per_code(tmp_path: Path) -> None:
    run = Run(tmp_path)
    assert run.tick(1, g(0), g(1)) == []
    assert brief(run.tick(2, g(0, xid_counts={79: 1}), g(1))) == [("xid", 0, 79, False)]
    assert run.tick(3, g(0, xid_counts={79: 1}), g(1)) == []
    events = run.tick(4, g(0, xid_counts={79: 3, 48: 1}), g(1))
    assert brief(events) == [("xid", 0, 48, False), ("xid", 0, 79, False)]
    assert "2 new, 3 since the agent started" in events[1].detail


def xid_counter(run: Run) -> dict[tuple[str, str, str, str], float]:
    """training_node_gpu_xid_errors_total's series: (gpu, uuid, model, xid) -> value."""
    fams = [f for f in run.health.metrics() if f.name == "training_node_gpu_xid_errors"]
    return {
        (s.labels["gpu"], s.labels["uuid"], s.labels["model"], s.labels["xid"]): s.value
        for f in fams
        for s in f.samples
    }


def kernel_line(address: str, xid: int) -> KernelXid:
    x = parse_xid(
        f"NVRM: Xid (PCI:{address}): {xid}, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    assert x is not None
    return x


def test_the_xid_counter_counts_each_xid_once_from_nvml_and_the_kernel_log(tmp_path: Path) -> None:
    run = Run(tmp_path, kernel_log="")
    bus = {0: "00000000:18:00.0", 1: "00000000:2B:00.0"}
    gpus = {i: {"pci_bus_id": a} for i, a in bus.items()}
    run.tick(1, g(0, **gpus[0]), g(1, **gpus[1]))
    assert xid_counter(run) == {}  # no series before the first Xid
    # the kernel's line first (NVML hangs), then NVML's event for the same error: one
    run.health.on_kernel_xid(kernel_line("0000:2b:00", 79))
    assert xid_counter(run) == {("1", "GPU-1", "H100", "79"): 1}
    run.tick(2, g(0, **gpus[0]), g(1, xid_counts={79: 1}, **gpus[1]))
    assert xid_counter(run) == {("1", "GPU-1", "H100", "79"): 1}
    # NVML first, then the kernel's line for it: one; then two more from NVML and one line: three
    run.tick(3, g(0, xid_counts={48: 1}, **gpus[0]), g(1, xid_counts={79: 1}, **gpus[1]))
    run.health.on_kernel_xid(kernel_line("0000:18:00", 48))
    run.tick(4, g(0, xid_counts={48: 3}, **gpus[0]), g(1, xid_counts={79: 1}, **gpus[1]))
    run.health.on_kernel_xid(kernel_line("0000:18:00", 48))
    assert xid_counter(run) == {("0", "GPU-0", "H100", "48"): 3, ("1", "GPU-1", "H100", "79"): 1}
    assert run.health.published["xid"] == 3  # one event per new count, as the counter counts
    # a GPU NVML does not name (passed to a VM): neither raised nor counted
    run.health.on_kernel_xid(kernel_line("0000:c1:00", 79))
    assert len(xid_counter(run)) == 2


def test_the_xid_counter_names_a_gpu_by_its_address_until_nvml_answers(tmp_path: Path) -> None:
    run = Run(tmp_path, kernel_log="")
    failing = {"gpu": CollectorStatus("gpu", False, 1.0, "NVML initialisation has not returned")}
    run.seq += 1
    for listener in run.listeners:  # NVML has not answered since the agent started
        listener(NodeSnapshot(seq=run.seq, timestamp=1, monotonic=1, collectors=failing))
    run.health.on_kernel_xid(kernel_line("0000:2b:00", 79))
    assert xid_counter(run) == {("0000:2b:00", "", "", "79"): 1}
    # NVML names the GPU, and reports the same Xid: counted once, where it was counted first
    run.tick(2, g(1, xid_counts={79: 1}, pci_bus_id="00000000:2B:00.0"))
    assert xid_counter(run) == {("0000:2b:00", "", "", "79"): 1}
    run.health.on_kernel_xid(kernel_line("0000:2b:00", 79))  # a second one: now GPU 1's
    assert xid_counter(run) == {("0000:2b:00", "", "", "79"): 1, ("1", "GPU-1", "H100", "79"): 1}


def test_a_lost_gpu_raises_once_and_clears_when_it_answers_again(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.tick(1, g(0), g(1))
    assert brief(run.tick(2, g(0), g(1, up=False))) == [("lost", 1, None, False)]
    assert run.tick(3, g(0), g(1, up=False)) == []
    assert run.tick(4, None) == []  # a tick without a GPU part (collector timed out) changes nothing
    assert brief(run.tick(5, g(0), g(1))) == [("lost", 1, None, True)]
    assert run.health.status()["lost"] == []


def test_a_gpu_already_lost_at_start_is_reported(tmp_path: Path) -> None:
    run = Run(tmp_path)
    unknown = GpuStats(0, "", "", False)  # lost before NVML could say who it is
    assert brief(run.tick(1, unknown)) == [("lost", 0, None, False)]
    assert "GPU 0 (uuid unknown) is lost" in run.health.status()["lines"]
    assert brief(run.tick(2, g(0))) == [("lost", 0, None, True)]


def test_uncorrectable_ecc_rise_and_row_remap_failure(tmp_path: Path) -> None:
    run = Run(tmp_path)
    assert run.tick(1, g(0, ecc_uncorrected_total=2)) == []  # the count at start is the baseline
    events = run.tick(2, g(0, ecc_uncorrected_total=5))
    assert brief(events) == [("ecc", 0, None, False)] and "from 2 to 5" in events[0].detail
    assert run.tick(3, g(0, ecc_uncorrected_total=5)) == []
    events = run.tick(4, g(0, ecc_uncorrected_total=5, row_remap_failure=True))
    assert brief(events) == [("ecc", 0, None, False)] and "row remapping failed" in events[0].detail
    assert run.tick(5, g(0, ecc_uncorrected_total=5, row_remap_failure=True)) == []


def test_throttling_raises_after_its_hold_and_clears(tmp_path: Path) -> None:
    run = Run(tmp_path, thermal_throttle_hold="30s", power_throttle_hold="2m")
    hot, capped = 0x40, 0x4
    assert run.tick(0, g(0, clocks_event_reasons=hot | capped)) == []
    assert run.tick(29, g(0, clocks_event_reasons=hot | capped)) == []
    events = run.tick(30, g(0, clocks_event_reasons=hot | capped))
    assert brief(events) == [("thermal-throttle", 0, None, False)]
    assert events[0].detail == "hw_thermal_slowdown for 30s"
    assert run.tick(60, g(0, clocks_event_reasons=hot | capped)) == []  # raised once per stretch
    assert brief(run.tick(61, g(0, clocks_event_reasons=capped))) == [("thermal-throttle", 0, None, True)]
    assert brief(run.tick(120, g(0, clocks_event_reasons=capped))) == [("power-throttle", 0, None, False)]
    assert brief(run.tick(121, g(0, clocks_event_reasons=0))) == [("power-throttle", 0, None, True)]
    # a stretch shorter than the hold never raises
    assert run.tick(200, g(0, clocks_event_reasons=hot)) == []
    assert run.tick(210, g(0, clocks_event_reasons=0)) == []
    assert run.health.published == {
        "thermal-throttle": 1,
        "thermal-throttle-cleared": 1,
        "power-throttle": 1,
        "power-throttle-cleared": 1,
    }


def test_degradation_read_through_the_fake_nvml_raises_after_its_hold_and_clears(
    tmp_path: Path, fake_nvml: FakeNvml, fake_nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-process collector on the fake NVML, its snapshots fed to GpuHealth at chosen times: a
    PCIe link trained down, an NVLink link down and a lowered power limit each raise once their hold
    has passed, and clear when they end."""
    monkeypatch.setattr(slow, "SLOW_SECONDS", 0.0)  # the slow reads at every tick
    monkeypatch.setattr(slow, "LINK_SECONDS", 0.0)
    run = Run(tmp_path, pcie_degraded_hold="60s", nvlink_down_hold="30s", power_limit_hold="5m")
    c = GpuCollector(library=str(fake_nvml_library), xid_events=False)

    def tick(at: float) -> list[tuple]:
        return brief(run.tick(at, *c.collect().gpus))

    try:
        assert tick(0) == []  # eight healthy H100s: Gen5 x16, 18 of 18 links, 700 W of 700 W
        fake_nvml.set(3, pcie_link_width=8, nvlink_inactive=[4], power_limit_mw=500_000)
        assert tick(1) == []
        assert tick(30) == []
        assert tick(31) == [("nvlink-down", 3, None, False)]
        assert tick(60) == []
        events = run.tick(61, *c.collect().gpus)
        assert brief(events) == [("pcie-degraded", 3, None, False)]
        assert events[0].detail == "PCIe link Gen5 x8 of Gen5 x16 for 60s"
        lines = run.health.status()["lines"]
        assert "GPU 3: nvlink-down: 1 of 18 NVLink links down" in lines
        assert "GPU 3: pcie-degraded: PCIe link Gen5 x8 of Gen5 x16" in lines
        assert tick(301) == [("power-limit-low", 3, None, False)]
        assert run.health.status()["degraded"][-1] == {
            "gpu": 3,
            "fault": "power-limit-low",
            "evidence": "power limit 500 W, below the default 700 W",
        }
        assert tick(302) == []  # raised once per stretch
        fake_nvml.set(3, pcie_link_width=16, nvlink_inactive=[], power_limit_mw=700_000)
        assert tick(303) == [
            ("pcie-degraded", 3, None, True),
            ("nvlink-down", 3, None, True),
            ("power-limit-low", 3, None, True),
        ]
        assert run.health.status()["degraded"] == []
        # a lower generation on an idle GPU is the link saving power; under load it is trained down
        fake_nvml.set(5, pcie_link_generation=1)
        assert tick(400) == [] and tick(500) == []
        fake_nvml.set(5, utilization_gpu=90)
        assert tick(501) == []
        assert tick(561) == [("pcie-degraded", 5, None, False)]
        fake_nvml.set(5, lost=True)  # a lost GPU shows no condition (as for throttling): lost ends it
        assert tick(562) == [("lost", 5, None, False), ("pcie-degraded", 5, None, True)]
    finally:
        c.close()
    assert run.health.published["nvlink-down-cleared"] == 1


def test_a_gpu_without_nvlink_or_a_limit_reading_raises_nothing(tmp_path: Path) -> None:
    run = Run(tmp_path, nvlink_down_hold="0s", power_limit_hold="0s", pcie_degraded_hold="0s")
    pcie_card = g(0, nvlink_links=None, nvlink_links_active=None, power_limit_watts=70.0)
    assert run.tick(1, pcie_card) == []  # no default limit read: nothing to compare with
    assert run.tick(2, g(0, pcie_link_width=16, pcie_link_width_max=None, utilization=1.0)) == []
    assert brief(run.tick(3, g(0, power_limit_watts=69.0, power_default_limit_watts=70.0))) == [
        ("power-limit-low", 0, None, False)
    ]


def test_a_row_remap_pending_a_reset_is_raised_and_cleared_by_the_reset(
    tmp_path: Path, fake_nvml: FakeNvml, fake_nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nvmlDeviceGetRemappedRows' isPending on the fake: raised at once by default (the state lasts
    until a reset), in status lines, cleared when the reset has remapped the rows."""
    monkeypatch.setattr(slow, "SLOW_SECONDS", 0.0)
    run = Run(tmp_path)
    c = GpuCollector(library=str(fake_nvml_library), xid_events=False)
    try:
        assert brief(run.tick(0, *c.collect().gpus)) == []
        fake_nvml.set(6, row_remap_pending=True)
        events = run.tick(1, *c.collect().gpus)
        assert brief(events) == [("row-remap-pending", 6, None, False)]
        assert "reset the GPU" in events[0].detail
        assert any(line.startswith("GPU 6: row-remap-pending") for line in run.health.status()["lines"])
        assert brief(run.tick(2, *c.collect().gpus)) == []  # once per stretch
        fake_nvml.set(6, row_remap_pending=False)
        assert brief(run.tick(3, *c.collect().gpus)) == [("row-remap-pending", 6, None, True)]
    finally:
        c.close()
