"""A cloud is one declaration: this toy (toy_cloud.py beside this test) declares itself, passes the
check every built-in cloud passes, and the real watcher, picking it from DMI alone, reads a notice
from its simulator face, with no other file knowing it exists."""

from __future__ import annotations

import asyncio
import importlib
import sys
import time

import pytest
from conftest import part_context
from declarations import cloud_gaps

from agent.alerts import i18n
from agent.config import parse_config
from agent.core.events import EventBus, PreemptionEvent
from agent.core.vocabulary import Language, NoticeKind
from agent.devtools.simulator import start_simulator
from agent.preemption import registry
from agent.preemption.watcher import PreemptionWatcher


@pytest.fixture
def toy():
    module = importlib.import_module("toy_cloud")
    yield module
    registry.forget("toy")
    sys.modules.pop("toy_cloud", None)


def test_the_toy_cloud_passes_the_declaration_check(toy):
    (spec,) = [s for s in registry.clouds() if s.name == "toy"]
    assert cloud_gaps(spec) == []
    assert registry.names()[-1] == "toy"  # its order puts it after the built-in five
    assert i18n.cloud("toy", Language.ZH_CN) == "玩具云"


async def test_auto_picks_the_toy_from_dmi_and_reads_its_notice(toy, tmp_path):
    dmi = tmp_path / "sys" / "class" / "dmi" / "id"
    dmi.mkdir(parents=True)
    (dmi / "sys_vendor").write_text("Toy Cloud\n")
    sim = await start_simulator("toy")
    bus = EventBus()
    queue = bus.subscribe("test", (PreemptionEvent,))
    cfg = parse_config(
        {
            "agent": {"state_dir": str(tmp_path / "state"), "sysfs": str(tmp_path / "sys")},
            "preemption": {"provider": "auto", "endpoints": {"toy": sim.url}, "poll_interval": "100ms"},
        }
    )
    ctx = part_context(cfg, bus, tmp_path / "state")
    watcher = PreemptionWatcher(ctx)
    assert watcher.provider_cls is toy.ToyProvider and watcher.endpoint == sim.url
    assert watcher.selected_by == "auto: DMI sys_vendor='Toy Cloud'"
    run = asyncio.create_task(watcher.run())
    try:
        sim.state.add_notice(NoticeKind.SPOT_TERMINATION, seconds=90)
        ev = await asyncio.wait_for(queue.get(), 15)  # the first notice the watcher publishes
        assert ev.provider == "toy" and ev.kind == NoticeKind.SPOT_TERMINATION and not ev.withdrawn
        assert ev.deadline is not None and 60 < ev.deadline.timestamp() - time.time() <= 90
        assert any(e["path"] == toy.RECLAIM_PATH for e in sim.state.log)
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        await watcher.stop()
        await sim.close()
