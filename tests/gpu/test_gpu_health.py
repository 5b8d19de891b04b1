"""GpuHealth on snapshot sequences: which GpuFaultEvents a run of snapshots raises, and when."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent.config import parse_config
from agent.core.events import EventBus, GpuFaultEvent
from agent.faults.gpu import GpuHealth
from agent.runtime.context import Context
from agent.snapshot import NodeSnapshot
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
