"""A source is a folder: this one (toy.py beside this test) registers itself, and the real daemon,
run in this process, shows it in the snapshot, on /metrics and in the status, with no other file
knowing it exists."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys

import aiohttp
import pytest
from conftest import free_port, unix_get

from agent.cli.status_view import render_status
from agent.config import parse_config
from agent.runtime.daemon import Daemon
from agent.sources import registry


@pytest.fixture
def toy():
    module = importlib.import_module("toy")
    yield module
    registry.unregister("toy")
    sys.modules.pop("toy", None)


async def test_a_toy_source_reaches_snapshot_metrics_and_status(toy, tmp_path):
    port = free_port()
    cfg = parse_config(
        {
            "agent": {
                "interval": "100ms",
                "state_dir": str(tmp_path / "state"),
                "runtime_dir": str(tmp_path / "run"),
                "procfs": "/proc",
            },
            "http": {"listen": f"127.0.0.1:{port}", "control_socket": str(tmp_path / "run" / "control.sock")},
            "gpu": {"enabled": False},
            # never the real /run/training-node-agent/agent.json
            "trainer": {"discovery_file": str(tmp_path / "run" / "agent.json")},
            "preemption": {"provider": "none"},
        }
    )
    daemon = Daemon(cfg, None)
    run = asyncio.create_task(daemon.run())
    try:
        for _ in range(300):  # 30 s at most, on a loaded machine
            snap = daemon._latest()
            if snap.part(toy.ToyPart) is not None and snap.rates.of(toy.ToyRates).toy_calls:
                break
            await asyncio.sleep(0.1)
        part = snap.part(toy.ToyPart)
        assert isinstance(part, toy.ToyPart) and part.mood == "cheerful on /proc"
        assert snap.parts["toy"] is part and snap.collectors["toy"].success
        (rate,) = snap.rates.of(toy.ToyRates).toy_calls.values()
        assert rate > 0  # two consecutive parts made a rate
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                metrics = await r.text()
            async with http.get(f"http://127.0.0.1:{port}/api/v1/status") as r:
                network_view = json.loads(await r.text())
        code, body = await asyncio.to_thread(unix_get, str(tmp_path / "run" / "control.sock"), "/status")
        assert code == 200
        status = json.loads(body)
        assert 'training_node_toy_calls_total{mood="cheerful on /proc"}' in metrics
        assert "training_node_toy_calls_per_second{" in metrics
        assert 'training_node_collector_success{collector="toy"} 1.0' in metrics
        assert status["snapshot"]["toy"]["mood"] == "cheerful on /proc"
        assert status["snapshot"]["toy"]["calls"] >= 2
        assert network_view["snapshot"]["toy"] == {"calls": network_view["snapshot"]["toy"]["calls"]}
        text = render_status(status)
        assert "[toy] cheerful on /proc" in text
        # the built-in sources are still there, in their order, before the toy
        assert text.index("[host]") < text.index("[toy]")
    finally:
        daemon._stop.set()
        assert await asyncio.wait_for(run, 10) == 0


def test_without_registration_there_is_no_toy(toy):
    from dataclasses import dataclass, replace

    from agent.snapshot import NodeSnapshot

    registry.unregister("toy")
    assert "toy" not in registry.names()
    snap = NodeSnapshot(seq=1, timestamp=0.0, monotonic=0.0)
    assert snap.part(toy.ToyPart) is None  # no toy source: no toy part
    assert snap.rates.of(toy.ToyRates) == toy.ToyRates()

    @dataclass(frozen=True)
    class Unnamed:  # a type that names no source is an error that names it, never a silent None
        calls: int

    with pytest.raises(LookupError, match="Unnamed names no source"):
        snap.part(Unnamed)
    with pytest.raises(LookupError, match="Unnamed names no source"):
        snap.rates.of(Unnamed)
    with pytest.raises(TypeError, match="ToyPart is not the part of a source named 'host'"):
        NodeSnapshot(seq=1, timestamp=0.0, monotonic=0.0, host=toy.ToyPart(1, "x"))
    # and a source whose types do not name it is refused where it registers, naming the fix
    with pytest.raises(TypeError, match="Unnamed must say source: ClassVar\\[str\\] = 'toy'"):
        registry.register(replace(toy.SOURCE, part_type=Unnamed))


def test_a_part_or_rates_type_belongs_to_one_source(toy):
    from dataclasses import replace

    from agent.snapshot import NodeSnapshot
    from agent.snapshot.rates import NodeRates

    # the type is how consumers find a source: a second source with the same one would be ambiguous
    with pytest.raises(ValueError, match="ToyPart is toy's"):
        registry.register(replace(toy.SOURCE, name="toy2"))
    with pytest.raises(ValueError, match="ToyRates is toy's"):
        registry.register(replace(toy.SOURCE, name="toy2", part_type=int))
    assert "toy2" not in registry.names()
    # a source without rates this interval reads as its dataclass's defaults, never as missing
    snap = NodeSnapshot(seq=1, timestamp=0.0, monotonic=0.0, toy=toy.ToyPart(1, "x"))
    assert snap.part(toy.ToyPart) == toy.ToyPart(1, "x")
    assert snap.rates.of(toy.ToyRates) == toy.ToyRates()
    assert NodeRates.of_rates(toy.ToyRates({"x": 2.0})).of(toy.ToyRates).toy_calls == {"x": 2.0}
