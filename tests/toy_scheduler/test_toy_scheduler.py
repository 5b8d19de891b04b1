"""A scheduler is one backend: this toy (toy_scheduler.py beside this test) declares itself, and the
real scheduler action drains, requeues and resumes through it, with no other file knowing it exists;
a copy of the toy that leaves out any required piece is refused, naming the piece."""

from __future__ import annotations

import ast
import asyncio
import importlib
import sys
import time
import types
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import part_context
from declarations import scheduler_gaps

from agent.alerts import i18n
from agent.config import ConfigError, parse_config
from agent.core.events import CheckpointEvent, EventBus, GpuFaultEvent, PreemptionEvent, SchedulerEvent
from agent.core.vocabulary import CheckpointPhase, GpuFault, Language, SchedulerProblem
from agent.scheduler import backend
from agent.scheduler.component import SchedulerComponent

TOY = Path(__file__).parent / "toy_scheduler.py"


@pytest.fixture
def toy():
    module = importlib.import_module("toy_scheduler")
    module.CLUSTER.reset(module.NODE)
    yield module
    backend.forget("toy")
    sys.modules.pop("toy_scheduler", None)


def _component(tmp_path: Path, **scheduler: Any) -> tuple[SchedulerComponent, asyncio.Queue]:
    bus = EventBus()
    alerts = bus.subscribe("test", (SchedulerEvent,))
    cfg = parse_config(
        {
            "agent": {"state_dir": str(tmp_path / "state"), "procfs": str(tmp_path / "proc")},
            "gpu": {"enabled": False},  # the health gate passes on the collectors alone
            "scheduler": {
                "poll_interval": "50ms",
                "resume_after": "200ms",
                "retry_max": "100ms",
                **scheduler,
            },
        }
    )
    ctx = part_context(cfg, bus, tmp_path / "state")
    return SchedulerComponent(ctx), alerts


async def _until(what: str, ok: Callable[[], object], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < end, f"waited {timeout:g}s for {what}"
        await asyncio.sleep(0.02)


def test_the_toy_is_declared_and_every_reader_sees_it(toy):
    assert scheduler_gaps(toy.ToyBackend) == []
    assert backend.backend_class("toy") is toy.ToyBackend and backend.kinds()[-1] == "toy"
    assert parse_config({"scheduler": {"kind": "toy"}}).scheduler.kind == "toy"
    assert i18n.scheduler(toy.ToyBackend.words, Language.ZH_CN) == "玩具调度器"
    backend.forget("toy")
    with pytest.raises(ConfigError, match="'none', 'slurm' or 'auto'"):
        parse_config({"scheduler": {"kind": "toy"}})


async def test_the_scheduler_action_drains_requeues_and_resumes_through_the_toy(toy, tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / toy.MARK).touch()  # kind auto: slurmd does not run in this procfs, the toy does
    comp, alerts = _component(tmp_path, kind="auto")
    cluster, node = toy.CLUSTER, toy.NODE
    run = asyncio.create_task(comp.run())
    try:
        await _until("the toy picked", lambda: comp.backend is not None and comp.node is not None)
        assert comp.node_name == node and cluster.asked[0] == "whoami"  # named by the backend itself
        # a lost GPU drains the node with the agent's own reason; its clearing lifts the drain
        lost = GpuFaultEvent(GpuFault.LOST, 0, "GPU-a", "H100")
        comp.ctx.bus.publish(lost)
        await _until("the drain", lambda: cluster.nodes[node].cordoned)
        assert cluster.nodes[node].note == "tna: gpu 0 (GPU-a) lost"
        comp.ctx.bus.publish(GpuFaultEvent(GpuFault.LOST, 0, "GPU-a", "H100", cleared=True))
        await _until("the resume", lambda: not cluster.nodes[node].cordoned)
        assert f"uncordon {node}" in cluster.asked
        # a notice drains; its episode's end requeues the requeueable job, names the other
        cluster.jobs = {"7": ("llama", "alice", True, node), "8": ("eval", "bob", False, node)}
        cluster.jobs["9"] = ("elsewhere", "carol", True, "toy-node-2")
        now = datetime.now(UTC)
        deadline = now + timedelta(seconds=60)
        comp.ctx.bus.publish(PreemptionEvent("aws", "spot-termination", "n-1", deadline, now))
        await _until("the notice's drain", lambda: cluster.nodes[node].cordoned)
        assert cluster.nodes[node].note.startswith("tna: spot-termination at ")
        comp.ctx.bus.publish(CheckpointEvent(CheckpointPhase.COMPLETED, "n-1", "spot-termination", deadline))
        await _until("the requeue", lambda: "requeue 7" in cluster.asked)
        assert set(cluster.jobs) == {"8", "9"}  # the refused one and another node's are left alone
        refused = await asyncio.wait_for(alerts.get(), 5)
        assert refused.problem == SchedulerProblem.NOT_REQUEUEABLE and refused.scheduler == "toy"
        assert refused.jobs == ("job 8 `eval` (bob)",)
        # the controller away: one alert in the toy's words, retried until it answers again
        cluster.down = True
        failing = await asyncio.wait_for(alerts.get(), 5)
        assert failing.problem == SchedulerProblem.FAILING and "toy controller away" in failing.detail
        assert comp.status()["error"] and comp.status()["lines"][-1].startswith("  toy failing:")
        cluster.down = False
        back = await asyncio.wait_for(alerts.get(), 5)
        assert back.cleared and back.scheduler == "toy"
        status = comp.status()
        assert status["kind"] == "toy" and status["node"] == node and status["owner"] == "agent"
        assert status["lines"][0].startswith(f"toy node {node}: drained by this agent: tna: spot-termination")
        assert status["actions"]["drain/ok"] == 2 and status["actions"]["resume/ok"] == 1
        assert status["actions"]["requeue/ok"] == 1 and status["actions"]["requeue/refused"] == 1
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


def test_the_alert_says_the_toy_s_name(toy):
    from agent.alerts.kinds import facts, render
    from agent.alerts.scene import Scene
    from agent.devtools.alert_examples import GPUS, NODE, NOW

    ev = SchedulerEvent(
        SchedulerProblem.FAILING,
        toy.NODE,
        "toy",
        detail="toy controller away",
        scheduler_words=toy.ToyBackend.words,
    )
    f = facts(ev)
    assert f is not None
    msg = render(ev, f, Scene(NODE, GPUS, UTC, NOW), Language.EN)
    assert msg.title == "Toy Scheduler does not answer the agent on gpu-node-17"
    assert ("scheduler", "toy") in msg.labels and ("scheduler_node", toy.NODE) in msg.labels


def _without(piece: str) -> str:
    """toy_scheduler.py's text with ``piece`` (a method or a class word of ToyBackend) taken out."""
    tree = ast.parse(TOY.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ToyBackend"]
    kept = [n for n in cls.body if _name(n) != piece]
    assert len(kept) == len(cls.body) - 1, f"the toy does not define {piece} itself"
    cls.body = kept
    return ast.unparse(tree)


def _name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def _load(text: str) -> None:
    copy = types.ModuleType("toy_scheduler_copy")
    sys.modules[copy.__name__] = copy  # its dataclasses look their module up
    try:
        exec(compile(text, str(TOY), "exec"), copy.__dict__)
    finally:
        del sys.modules[copy.__name__]


def test_the_toy_defines_exactly_the_required_pieces_and_a_whole_copy_loads(toy):
    tree = ast.parse(TOY.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ToyBackend"]
    assert {_name(n) for n in cls.body} - {"order"} == {*backend.REQUIRED_ATTRS, *backend.REQUIRED_CALLS}
    backend.forget("toy")
    _load(TOY.read_text())  # the copy loads as it is: each refusal below is the missing piece's
    assert backend.backend_class("toy") is not None


@pytest.mark.parametrize("piece", [*backend.REQUIRED_ATTRS, *backend.REQUIRED_CALLS])
def test_a_toy_that_leaves_out_a_piece_is_refused_naming_it(toy, piece):
    with pytest.raises(TypeError, match=rf"scheduler backend ToyBackend does not define {piece}$"):
        _load(_without(piece))
    assert backend.backend_class("toy") is toy.ToyBackend  # the refused copy replaced nothing
