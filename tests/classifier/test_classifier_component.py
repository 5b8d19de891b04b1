"""The classifier inside the daemon: metrics, status, the systemd status line, events on the bus, and
the real daemon serving all of it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from classifier_synth import COMPUTE, NETWORK, STORAGE, fast_cfg, like, snapshot
from conftest import REPO, async_wait_until, need_binary
from prometheus_client import generate_latest

from agent.classifier import baselines as store
from agent.classifier.component import ClassifierComponent
from agent.config import Config
from agent.context import Context
from agent.core.events import CheckpointEvent, EventBus, VerdictEvent
from agent.exporter import make_registry
from agent.runtime.control import control_request


def make(tmp_path: Path, **cfg_kw) -> tuple[ClassifierComponent, Context, list]:
    cfg = Config(classifier=fast_cfg(**cfg_kw))
    listeners: list = []
    ctx = Context(
        cfg=cfg,
        bus=EventBus(),
        latest=lambda: None,  # type: ignore[arg-type,return-value]
        state_dir=tmp_path / "state",
        runtime_dir=tmp_path / "run",
        snapshot_listeners=listeners,
    )
    return ClassifierComponent(ctx), ctx, listeners


def feed(listeners: list, regimes, t0: int = 0) -> int:
    t = t0
    for r in regimes:
        for k in range(r.seconds):
            t += 1
            for fn in listeners:
                fn(snapshot(t, float(t), r, r.phases[k % len(r.phases)]))
    return t


class _Adapter:
    def __init__(self, comp: ClassifierComponent) -> None:
        self.comp = comp

    def collect(self):
        return self.comp.metrics()

    def describe(self):
        return []


def test_metrics_status_and_line(tmp_path: Path) -> None:
    comp, _, listeners = make(tmp_path, confirmations=2)
    reg = make_registry()
    reg.register(_Adapter(comp))
    assert comp.status()["lines"][0].startswith("verdict: pending")
    assert comp.verdict_line() == "verdict pending"
    feed(listeners, [like(COMPUTE, seconds=20), like(STORAGE, seconds=30)])
    text = generate_latest(reg).decode()
    assert 'training_node_bottleneck{class="data"} 1.0' in text
    assert 'training_node_bottleneck{class="compute"} 0.0' in text
    assert 'training_node_bottleneck{class="mixed"} 0.0' in text
    assert 'training_node_bottleneck_score{class="data"} 0.709' in text
    assert "training_node_bottleneck_changes_total 1.0" in text
    promtool = need_binary("promtool", "prometheus")
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout + check.stderr == "", check.stdout + check.stderr

    st = comp.status()
    assert st["verdict"] == "data" and st["sub_reason"] == "storage"
    assert st["since"] is not None and st["hint"].startswith("Input is storage-bound")
    # 140 MB/s over the 71% of the time the GPUs starved (the working samples' 3% without a kernel too)
    assert any(r.startswith("disk vda read 140 MB/s on average = 99% of ~200 MB/s") for r in st["reasons"])
    assert st["scores"]["data"] == 0.709 and st["changes_total"] == 1
    assert st["learned"]["peaks_bytes_per_second"]["disk"]["vda"] == 200e6
    json.dumps(st)  # served as JSON
    lines = st["lines"]
    assert lines[0].startswith("verdict: DATA/STORAGE for ")
    assert any(x.startswith("  - disk vda read 140 MB/s") for x in lines)
    assert any(x.startswith("hint: Input is storage-bound") for x in lines)
    # compute: its 30% working share less half the 70% of starvation the storage explains
    assert any(x.startswith("scores: compute 0.00  data 0.71") for x in lines), lines
    line = comp.verdict_line()
    assert line.startswith("data/storage for ") and "GPUs starved" in line and "\n" not in line


def test_the_slow_gpu_is_exported_with_its_reason(tmp_path: Path) -> None:
    comp, _, listeners = make(tmp_path, window="30s")
    reg = make_registry()
    reg.register(_Adapter(comp))
    lockstep = like(COMPUTE, phases=("work", "work", "spin"), gpus=8, seconds=40)
    feed(listeners, [like(lockstep, slow=(5,), slow_throttle=0x40)])  # HW thermal slowdown
    text = generate_latest(reg).decode()
    assert 'training_node_verdict_info{class="compute",reason="degraded-gpu"} 1.0' in text, text
    assert 'training_node_gpu_slow{gpu="5",reason="thermal throttling (hardware)"} 1.0' in text
    assert text.count("training_node_gpu_slow{") == 1
    feed(listeners, [like(lockstep, seconds=40)], 40)  # the GPU recovered: named no more
    text = generate_latest(reg).decode()
    assert "training_node_gpu_slow{" not in text and 'reason="degraded-gpu"' not in text, text


async def test_events_checkpoints_and_saving(tmp_path: Path) -> None:
    comp, ctx, listeners = make(tmp_path, confirmations=2, sustain="6s", save_every="1s")
    verdicts = ctx.bus.subscribe("test", (VerdictEvent,))
    task = asyncio.create_task(comp.run())
    try:
        t = feed(listeners, [like(COMPUTE, seconds=20), like(NETWORK, seconds=30)])
        ev = verdicts.get_nowait()
        assert isinstance(ev, VerdictEvent) and ev.verdict == "network" and not ev.cleared
        # a checkpoint request arrives through the bus and holds the verdict
        ctx.bus.publish(
            CheckpointEvent(phase="requested", event_id="e1", notice_kind="spot-termination", deadline=None)
        )
        await async_wait_until(lambda: comp.engine.checkpoints, what="the checkpoint to hold the verdict")
        t = feed(listeners, [like(STORAGE, seconds=30)], t)
        assert comp.status()["verdict"] == "network" and comp.status()["held"] == "checkpoint in progress"
        assert "(checkpoint in progress)" in comp.verdict_line()
        ctx.bus.publish(
            CheckpointEvent(
                phase="completed", event_id="e1", notice_kind="spot-termination", deadline=datetime.now(UTC)
            )
        )
        await async_wait_until(lambda: not comp.engine.checkpoints, what="the checkpoint to end")
        saved_file = tmp_path / "state" / store.FILE_NAME
        await async_wait_until(saved_file.exists, timeout=10, what="the baselines saved (save_every 1s)")
    finally:
        task.cancel()
        await comp.stop()
    saved = store.load(tmp_path / "state")
    assert saved.peaks["nic"]["eth0"] == 2.9e9
    again, _, _ = make(tmp_path)
    assert again.engine.baselines == saved


async def test_history_route(tmp_path: Path) -> None:
    comp, _, listeners = make(tmp_path)
    feed(listeners, [like(COMPUTE, seconds=20)])
    [(method, path, handler)] = comp.control_routes()
    assert (method, path) == ("GET", "/classifier/history")

    class Req:
        query = {"n": "3"}

    resp = await handler(Req())
    body = json.loads(resp.body)
    assert body["total"] == 9 and len(body["evaluations"]) == 3
    assert body["evaluations"][-1]["verdict"] == "compute"


def test_the_daemon_serves_the_verdict(agent_factory, tmp_path: Path) -> None:
    """The real daemon, no GPUs on this box: the classifier runs, says idle, and shows it."""
    agent = agent_factory(
        {"classifier": {"window": "2s", "evaluate_every": "400ms", "confirmations": 2, "warmup": "0s"}}
    )
    st = agent.wait_for(
        lambda: (s := agent.status()).get("classifier", {}).get("verdict") and s, what="a verdict", timeout=20
    )
    cls = st["classifier"]
    assert cls["verdict"] == "idle" and cls["scores"]["idle"] == 1.0
    assert cls["lines"][0].startswith("verdict: IDLE for ")
    text = agent.metrics()
    assert 'training_node_bottleneck{class="idle"} 1.0' in text
    assert "training_node_bottleneck_score{" in text and "training_node_bottleneck_changes_total" in text
    out = subprocess.run(
        [sys.executable, "-m", "agent", "status", "--config", str(agent.config_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 0, out.stderr
    assert "[classifier]" in out.stdout and "verdict: IDLE" in out.stdout
    code, data = asyncio.run(control_request(agent.control_socket, "GET", "/classifier/history"))
    assert code == 200
    assert data["total"] >= 2 and data["evaluations"][-1]["verdict"] == "idle"
    assert agent.stop() == 0
    saved = json.loads((agent.state_dir / store.FILE_NAME).read_text())
    assert saved["version"] == 1
