"""One reclaim, one request, one signal, end to end: the real daemon against the metadata simulator
(a subprocess) serving a spot notice whose time is recomputed on every read, like
amazon-ec2-metadata-mock's default mode, and then restarting with an earlier time."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from checkpoint_helpers import Trainer, metric, recent_events
from conftest import wait_until

from agent.devtools.simprocess import MetadataSimProcess


@pytest.fixture
def sim(tmp_path):
    p = MetadataSimProcess(tmp_path / "metadata-sim.log", "aws")
    yield p
    p.stop()


def test_moving_time_and_an_earlier_restart_are_one_request_one_signal(agent_factory, tmp_path, sim):
    trainer = Trainer(tmp_path, "mv", tmp_path / "cp" / "request.json", "--no-ack", "--keep-going")
    try:
        agent = agent_factory(
            {
                "preemption": {"provider": "aws", "endpoint": sim.url, "poll_interval": "200ms"},
                "trainer": {
                    "discover": [f"cmdline:{trainer.marker}"],
                    "request_file": str(tmp_path / "cp" / "request.json"),
                    "escalate_before": "0s",
                },
            }
        )
        sim.control("/notice", {"kind": "spot-termination", "seconds": 600, "moving": True})
        sim.control("/notice", {"kind": "rebalance-recommendation", "moving": True})
        wait_until(lambda: trainer.events("signal"), what="the checkpoint signal")
        polls = sim.read_state()["requests"]
        # every read serves a later time: 25 more reads, nothing new may come of them
        wait_until(lambda: sim.read_state()["requests"] > polls + 50, 30, what="more reads")
        [episode] = agent.status()["checkpoint"]["active"]
        before = datetime.fromisoformat(episode["deadline"])
        # the service restarts (refused for 2 s) and serves the same notice five minutes earlier
        restarted = time.time()
        sim.control("/restart", {"down": 2, "shift": -300})
        wait_until(
            lambda: datetime.fromisoformat(agent.status()["checkpoint"]["active"][0]["deadline"]) < before,
            30,
            what="the episode hearing of the earlier deadline",
        )
        assert "checkpoint deadline moved earlier" in agent.log()
        polls = sim.read_state()["requests"]
        wait_until(lambda: sim.read_state()["requests"] > polls + 30, 30, what="reads after the restart")

        notices = recent_events(agent, "preemption")
        spot = {e["event_id"] for e in notices if e["kind"] == "spot-termination"}
        rebalance = {e["event_id"] for e in notices if e["kind"] == "rebalance-recommendation"}
        assert len(spot) == 1 and len(rebalance) == 1, notices
        assert not [e for e in notices if e["withdrawn"]]
        assert len(trainer.events("signal")) == 1, "signalled more than once for one reclaim"
        m = agent.metrics()
        assert metric(m, "training_node_checkpoint_requests_total", 'drill="false"') == 1
        phases = [e["phase"] for e in recent_events(agent)]
        assert phases == ["requested"], phases  # nothing canceled, nothing requested again
        [episode] = agent.status()["checkpoint"]["active"]
        # moving: the restarted service serves "request time + 300 s"
        left = datetime.fromisoformat(episode["deadline"]).timestamp() - restarted
        assert 295 <= left <= 315, left
        assert episode["event_id"] in spot
    finally:
        trainer.stop()
