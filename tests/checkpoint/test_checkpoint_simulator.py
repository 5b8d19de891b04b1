"""End to end on loopback: the metadata simulator announces a notice -> the real daemon's watcher ->
the checkpoint action -> a signal to a real trainer process -> its checkpoint and ack -> metrics and
status."""

from __future__ import annotations

import re

import pytest
from checkpoint_helpers import Trainer, cli, control, metric, recent_events
from conftest import wait_until

from agent.devtools.simprocess import MetadataSimProcess


@pytest.fixture
def sim(tmp_path):
    """``training-node-agent metadata-sim --provider alibaba`` on loopback."""
    p = MetadataSimProcess(tmp_path / "metadata-sim.log", "alibaba")
    yield p
    p.stop()


def _cfg(tmp_path, sim_url: str, marker: str, **trainer: object) -> dict:
    return {
        "preemption": {
            "provider": "alibaba",
            "endpoint": sim_url,
            "poll_interval": "250ms",
            "maintenance_interval": "250ms",
        },
        "trainer": {
            "discover": [f"cmdline:{marker}"],
            "request_file": str(tmp_path / "cp" / "request.json"),
            **trainer,
        },
    }


def test_spot_notice_to_signal_to_checkpoint_to_ack(agent_factory, tmp_path, sim):
    trainer = Trainer(tmp_path, "e2e", tmp_path / "cp" / "request.json", "--save-seconds", "0.5")
    try:
        agent = agent_factory(_cfg(tmp_path, sim.url, trainer.marker))
        sim.control("/notice", {"kind": "spot-termination", "seconds": 300})
        assert trainer.proc.wait(20) == 0, trainer.log()  # checkpointed, acked, exited cleanly
        assert len(trainer.events("signal")) == 1
        [ckpt] = trainer.events("checkpoint")
        assert trainer.events("ack")[0]["step"] == ckpt["step"]
        wait_until(
            lambda: metric(agent.metrics(), "training_node_checkpoint_completed_total", 'drill="false"') == 1,
            what="completed counter",
        )
        m = agent.metrics()
        assert metric(m, "training_node_checkpoint_requests_total", 'drill="false"') == 1
        assert metric(m, "training_node_checkpoint_duration_seconds_count", 'drill="false"') == 1
        assert metric(m, "training_node_checkpoint_duration_seconds_sum", 'drill="false"') >= 0.5
        assert metric(m, "training_node_checkpoint_deadline_missed_total", 'drill="false"') == 0
        st = agent.status()["checkpoint"]
        [last] = st["recent"]
        assert last["phase"] == "completed" and last["provider"] == "alibaba" and not last["drill"]
        assert any(line.startswith("last: spot-termination completed in") for line in st["lines"])
        phases = [e["phase"] for e in recent_events(agent)]
        assert phases == ["requested", "completed"]
        [notice] = recent_events(agent, "preemption")
        assert notice["kind"] == "spot-termination" and notice["event_id"] == last["event_id"]
        code, report = control(agent, "GET", "/checkpoint/report")
        assert code == 200 and report["verdict"] == "safe"
        assert report["verdict_line"].startswith("SAFE on Alibaba Cloud spot")
        assert report["targets"][0]["pid"] == trainer.pid and report["ack"]["path"] == ckpt["path"]
    finally:
        trainer.stop()


def test_withdrawn_maintenance_cancels_the_pending_checkpoint(agent_factory, tmp_path, sim):
    trainer = Trainer(tmp_path, "mw", tmp_path / "cp" / "request.json", "--keep-going")
    try:
        agent = agent_factory(_cfg(tmp_path, sim.url, trainer.marker, checkpoint_budget="10m"))
        ev = sim.control("/maintenance", {"kind": "reboot", "seconds": 3600})
        active = wait_until(lambda: agent.status()["checkpoint"]["active"], what="the scheduled episode")
        assert active[0]["phase"] == "scheduled" and active[0]["kind"] == "maintenance-reboot"
        acting_in = int(re.match(r"acting in (\d+) s", active[0]["line"]).group(1))
        assert 2990 <= acting_in <= 3000  # deadline 3600 s - budget 600 s
        sim.control("/cancel", {"id": ev["id"]})
        wait_until(lambda: not agent.status()["checkpoint"]["active"], what="the cancellation")
        [canceled] = [e for e in recent_events(agent) if e["phase"] == "canceled"]
        assert "withdrew" in canceled["detail"]
        assert trainer.events("signal") == [] and trainer.events("checkpoint") == []
        assert not (tmp_path / "cp" / "request.json").exists()
        assert metric(agent.metrics(), "training_node_checkpoint_requests_total", 'drill="false"') == 0
    finally:
        trainer.stop()


def test_agent_restart_during_a_notice_sends_no_second_signal(agent_factory, tmp_path, sim):
    trainer = Trainer(tmp_path, "rs", tmp_path / "cp" / "request.json", "--no-ack", "--keep-going")
    try:
        agent = agent_factory(_cfg(tmp_path, sim.url, trainer.marker))
        sim.control("/notice", {"kind": "spot-termination", "seconds": 300})
        wait_until(lambda: trainer.events("checkpoint"), what="the trainer's checkpoint")
        assert agent.stop() == 0
        agent.start()
        # the notice is still served on every poll; the restarted agent must not act on it again
        active = wait_until(lambda: agent.status()["checkpoint"]["active"], what="the resumed episode")
        assert active[0]["phase"] == "requested"
        wait_until(lambda: agent.status()["preemption"].get("active"), what="the watcher seeing the notice")
        wait_until(lambda: sim.read_state()["requests"] > 8, what="a few more polls")
        assert len(trainer.events("signal")) == 1, "signalled twice"
        res = cli(agent, "ack", "--step", "9")
        assert res.returncode == 0, res.stdout + res.stderr
        assert metric(agent.metrics(), "training_node_checkpoint_completed_total", 'drill="false"') == 1
    finally:
        trainer.stop()
