"""The agent's side of discovery: the record it publishes and takes back, the identity in every
request, the trainers' notes it reads, and a discovery log line that says no-handler only after the
target's start-up grace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from checkpoint_helpers import REPO, idle_process
from tna_client import PreemptionGuard
from tna_client.discovery import discovery_file_for, read_record
from tna_client.node import Node

from agent.checkpoint.publish import agent_identity, discovery_path, publish, trainer_notes, unpublish


def test_an_agent_under_its_own_user_publishes_in_its_runtime_directory(tmp_path):
    """The packaged unit: a service user owning /run/training-node-agent (its RuntimeDirectory)
    publishes there, where trainers look first, not in a /tmp that PrivateTmp hides."""
    uid = os.geteuid() or 4321  # as root, play a service user by owning the directory as another uid
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    os.chown(run, uid, -1)
    root_file = str(run / "agent.json")
    assert discovery_path("", uid, root_file) == run / "agent.json"
    assert discovery_path("/elsewhere/agent.json", uid, root_file) == Path("/elsewhere/agent.json")
    assert discovery_path("none", uid, root_file) is None
    # not ours, open to others, or absent: the per-user place
    cases = [(0o775, uid)] + ([(0o755, uid + 1)] if os.geteuid() == 0 else [])
    for mode, owner in cases:
        os.chown(run, owner, -1)
        run.chmod(mode)
        assert discovery_path("", uid, root_file) == Path(discovery_file_for(uid)), (mode, owner)
    assert discovery_path("", uid, str(tmp_path / "absent" / "agent.json")) == Path(discovery_file_for(uid))


def test_record_round_trip_and_trust(tmp_path):
    ident = agent_identity()
    path = tmp_path / "tna" / "agent.json"
    request = tmp_path / "state" / "run" / "checkpoint" / "request.json"
    publish(path, request, ident, "SIGUSR1")
    assert oct(path.parent.stat().st_mode & 0o777) == "0o755"
    record, why = read_record(str(path), Node.here())
    assert why == "" and record is not None
    assert record["request_file"] == str(request) and record["agent"]["pid"] == os.getpid()
    # a newer agent replaced it: the old one leaves it alone when it stops
    other = {**ident, "instance": uuid.uuid4().hex}
    publish(path, request, other, "SIGUSR1")
    unpublish(path, ident)
    assert path.exists()
    unpublish(path, other)
    assert not path.exists()
    # a directory others can write is refused, on both sides
    squat = tmp_path / "squat"
    squat.mkdir(mode=0o777)
    os.chmod(squat, 0o777)
    with pytest.raises(PermissionError, match="writable by others"):
        publish(squat / "agent.json", request, ident, "SIGUSR1")


def test_trainer_notes_of_gone_processes_are_dropped(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    for pid, rank in ((os.getpid(), 0), (gone.pid, 1)):
        (tmp_path / f"trainer-{pid}.json").write_text(json.dumps({"pid": pid, "rank": rank, "time": "t"}))
    (tmp_path / "trainer-junk.json").write_text("{not json")
    notes = trainer_notes(tmp_path)
    assert notes == [{"pid": os.getpid(), "rank": 0, "since": "t"}]
    assert not (tmp_path / f"trainer-{gone.pid}.json").exists()


@pytest.mark.parametrize(("grace", "expect"), [("120s", "starting ("), ("0s", "no-handler")])
def test_discovery_log_says_no_handler_only_after_the_grace(agent_factory, tmp_path, grace, expect):
    marker = f"grace-{uuid.uuid4().hex[:8]}"
    proc = idle_process(marker)  # no handler: a trainer still importing its framework looks like this
    try:
        agent = agent_factory(
            {
                "trainer": {
                    "discover": [f"cmdline:{marker}"],
                    "startup_grace": grace,
                    "discover_interval": "1s",
                }
            }
        )

        def logged() -> list[str]:
            lines = [x for x in agent.log_lines() if x.get("event") == "checkpoint targets"]
            return [t for x in lines for t in x.get("targets", [])]

        agent.wait_for(lambda: logged(), what="the discovery log line")
        [line] = logged()
        assert f"pid {proc.pid}" in line and expect in line, line
        if expect != "no-handler":
            assert "no-handler" not in line
        # status tells the truth at once either way
        [target] = agent.status()["checkpoint"]["targets"]
        assert target["handler"] == "no-handler"
    finally:
        proc.kill()
        proc.wait()


def test_restarted_agent_claims_its_open_request(agent_factory, tmp_path):
    """A request whose agent died is ignored; the restarted agent resumes the episode and rewrites the
    request as its own, and a trainer obeys it again."""
    marker = f"claim-{uuid.uuid4().hex[:8]}"
    proc = idle_process(marker, handler="SIGUSR1")  # takes the signal, never acks
    request = tmp_path / "cp" / "request.json"
    try:
        trainer = {"discover": [f"cmdline:{marker}"], "request_file": str(request)}
        agent = agent_factory({"trainer": trainer})
        drill = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agent",
                "drill",
                "--deadline",
                "300s",
                "--config",
                str(agent.config_path),
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        agent.wait_for(lambda: request.exists() and _body(request)["state"] == "requested", what="request")
        first = _body(request)["agent"]
        assert first["pid"] == agent.proc.pid
        agent.kill9()
        drill.wait(30)
        guard = PreemptionGuard(signal=None, request_file=str(request), check_interval=0)
        assert not guard.checkpoint_requested  # its agent is gone
        agent.start()
        agent.wait_for(lambda: _body(request)["agent"]["pid"] == agent.proc.pid, what="the request claimed")
        assert _body(request)["event_id"].startswith("drill-") and _body(request)["state"] == "requested"
        assert _body(request)["agent"]["instance"] != first["instance"]
        assert guard.checkpoint_requested and guard.event_id == _body(request)["event_id"]
    finally:
        proc.kill()
        proc.wait()


def _body(path) -> dict:
    return json.loads(path.read_text())
