"""A run like ``make demo``'s, played through the real ledger and report parts in a second: four GPUs
training (``compute``), then input-bound (decoding on the CPU: ``data/cpu``), fed again, a
periodic checkpoint, a thermal slowdown on one GPU, and a spot reclaim whose final checkpoint is
acknowledged. Snapshots are made by hand (NVML's figures as a real H100 with GPM gives them) and
handed to the ``LedgerComponent`` and the ``ReportRecorder`` as the sampler would; the clock is the
snapshots' own. The report test renders its page in Chromium; ``bench/report_page.py`` plays a week.

``python -m agent.devtools.report_run OUT.html`` writes the page.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent import __version__
from agent.classifier.baselines import Baselines
from agent.classifier.published import NO_PRESSURES, Pressures, Published
from agent.config import Config, parse_config
from agent.context import Context
from agent.core.events import CheckpointEvent, EventBus, GpuFaultEvent, PreemptionEvent
from agent.core.vocabulary import CheckpointPhase, Cloud, GpuFault, NoticeKind
from agent.devtools.demo_screen import DemoFailed
from agent.ledger.component import LedgerComponent
from agent.ledger.saved import Saved
from agent.report.data import PageData
from agent.report.gather import page_data
from agent.report.recorder import ReportRecorder, mark_of
from agent.snapshot import NodeSnapshot
from agent.snapshot.rates import NodeRates
from agent.sources.gpu.part import GpuPart, GpuProcess, GpuStats
from agent.sources.gpu.reasons import ClockReason
from agent.sources.network.rates import NetworkRates
from agent.sources.storage.rates import StorageRates

START = 1_767_000_000.0  # 2025-12-29 09:20 UTC: a fixed clock, the same page every run
GPUS = 4
GIB = 2**30
# (seconds, phase): the story; a phase is the GPUs' state and the verdict the classifier gives it
STORY = (
    (90.0, "compute"),
    (60.0, "data/cpu"),
    (60.0, "compute"),
    (30.0, "reclaim"),
)
# (sm activity, utilization) of a GPU in each phase: what NVML reads (tests/ledger's H100 figures)
READINGS = {"compute": (0.85, 0.97), "data/cpu": (0.02, 0.10), "reclaim": (0.02, 0.10)}
PRESSURES = {"data/cpu": Pressures(cpu=0.9)}


@dataclass
class Played:
    """What the run left: the parts, and when each phase began (wall seconds)."""

    ledger: LedgerComponent
    recorder: ReportRecorder
    end: float
    phases: list[tuple[float, str]] = field(default_factory=list)
    state_dir: Path | None = None

    def data(self) -> PageData:
        return page_data(
            self.ledger, self.recorder.timeline, self.end, self.end - START, "demo-node", __version__
        )


def config(state_dir: Path, resolution: str = "5s") -> Config:
    return parse_config(
        {
            "agent": {"state_dir": str(state_dir), "runtime_dir": str(state_dir / "run")},
            "goodput": {"resolution": resolution, "window": "1h", "settle": "10m", "keep": "8d"},
            "cost": {"instance_hour_price": 98.32, "currency": "USD", "instance_type": "p5.48xlarge"},
        },
        "<report run>",
    )


class Player:
    """Snapshots and events into the two parts, one tick at a time."""

    def __init__(self, state_dir: Path, resolution: str = "5s", gpus: int = GPUS) -> None:
        self.cfg = config(state_dir, resolution)
        self.ctx = Context(self.cfg, EventBus(), lambda: NodeSnapshot(0, 0.0, 0.0), state_dir, state_dir, [])
        self.pressures = NO_PRESSURES
        self.verdict: str | None = None
        baselines = Baselines()
        self.ledger = LedgerComponent(
            self.ctx, lambda: Published(self.pressures, baselines, self.cfg.classifier)
        )
        self.recorder = ReportRecorder(self.ctx, self.ledger, lambda: self.verdict)
        self.gpus = gpus
        self.seq = 0

    def tick(self, t: float, phase: str, hot: bool = False) -> None:
        sm, util = READINGS.get(phase, READINGS["compute"])
        self.pressures = PRESSURES.get(phase, NO_PRESSURES)
        self.verdict = "compute" if phase == "reclaim" else phase
        stats = tuple(
            GpuStats(
                index=i,
                uuid=f"GPU-demo-{i}",
                model="NVIDIA H100 80GB HBM3",
                up=True,
                utilization=util,
                graphics_active=util,
                sm_active=sm,
                memory_used_bytes=int((61 + i + (4 if phase == "compute" else 0)) * GIB),
                memory_total_bytes=80 * GIB,
                power_watts=180 + 480 * sm,
                power_limit_watts=700.0,
                clocks_event_reasons=int(ClockReason.HW_THERMAL_SLOWDOWN if hot and i == 2 else 0),
                processes=(GpuProcess(4242, 60 * GIB),),
            )
            for i in range(self.gpus)
        )
        data = phase == "data/cpu"
        rates = NodeRates.of_rates(
            StorageRates(disk_read={"nvme0n1": 40e6 if data else 900e6}, nfs_read={"/data": 120e6}),
            NetworkRates(nic_rx={"eth0": 30e6}, rdma_rx={("mlx5_0", 1): 0.0 if data else 9e9}),
            interval_seconds=1.0,
        )
        self.seq += 1
        snap = NodeSnapshot(self.seq, t, t - START, gpu=GpuPart("550.54", "12.550", stats), rates=rates)
        for listener in self.ctx.snapshot_listeners:
            listener(snap)

    def event(self, ev: CheckpointEvent | PreemptionEvent | GpuFaultEvent) -> None:
        self.ledger.handle(ev)
        m = mark_of(ev)
        if m is not None:
            self.recorder.timeline.mark(m)


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def play(state_dir: Path) -> Played:
    """The story at one tick a second."""
    p = Player(state_dir)
    played = Played(p.ledger, p.recorder, START, state_dir=state_dir)
    t = START
    p.tick(t, "compute")  # the first snapshot sets the clock
    for seconds, phase in STORY:
        played.phases.append((t, phase))
        for _ in range(int(seconds)):
            t += 1.0
            p.tick(t, phase, hot=START + 40 <= t < START + 70)
            if t == START + 40:
                p.event(
                    GpuFaultEvent(GpuFault.THERMAL_THROTTLE, 2, "GPU-demo-2", "H100", "HW thermal", at=_at(t))
                )
            if t == START + 180:
                p.ledger.book_reports([Saved(t, 6.0, 1200, "/ckpt/step-1200", 4242)])
            if phase == "reclaim" and t == played.phases[-1][0] + 5:
                notice = PreemptionEvent(
                    Cloud.ALIBABA, NoticeKind.SPOT_TERMINATION, "demo-1", _at(t + 120), _at(t)
                )
                p.event(notice)
                p.event(
                    CheckpointEvent(
                        CheckpointPhase.REQUESTED, "demo-1", notice.kind, notice.deadline, at=_at(t)
                    )
                )
            if phase == "reclaim" and t == played.phases[-1][0] + 20:
                p.event(
                    CheckpointEvent(
                        CheckpointPhase.COMPLETED,
                        "demo-1",
                        NoticeKind.SPOT_TERMINATION,
                        None,
                        at=_at(t),
                        duration_seconds=14.0,
                    )
                )
    played.end = t
    return played


Control = Callable[[str, str], Awaitable[tuple[int, Any]]]


async def fetch_page(control: Control, start: float, html: Path, phases: list[tuple[float, str]]) -> Path:
    """``make demo``'s page: the running agent's ``GET /report`` from wall time ``start`` on,
    written to ``html``, and beside it (``.phases.json``) when the demo changed the job's phase,
    which the page's test holds the verdict changes against."""
    code, page = await control("GET", f"/report?since={time.time() - start:.0f}")
    if code != 200 or not isinstance(page, str):
        raise DemoFailed(f"no report page: {page}")
    html.parent.mkdir(parents=True, exist_ok=True)
    html.write_text(page)
    html.with_suffix(".phases.json").write_text(json.dumps(phases))
    return html


def main(argv: list[str]) -> int:
    from agent.report.page import build_page

    if len(argv) != 1:
        print("usage: python -m agent.devtools.report_run OUT.html", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tna-report-") as d:
        played = play(Path(d))
        Path(argv[0]).write_text(build_page(played.data()))
        asyncio.run(played.recorder.stop())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
