"""Whose request is it: the client trusts a live writer over a boot id, and still refuses requests from
another node or from before a reboot. Real processes throughout; the boot id mismatch is made the way
systemd-nspawn makes it, by a bind mount over /proc/sys/kernel/random/boot_id in a mount namespace."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from tna_client import PreemptionGuard
from tna_client.discovery import read_record
from tna_client.node import Node, identity, read_boot_id, start_ticks

# The "agent": writes a request and a discovery record naming itself, then waits to be killed.
AGENT = """
import json, os, sys, time
from tna_client.node import identity
req, record = sys.argv[1], sys.argv[2]
me = identity()
body = {"version": 2, "event_id": "ev-nspawn", "state": "requested", "kind": "spot-termination",
        "deadline_unix": time.time() + 300, "ack_path": os.path.dirname(req) + "/ack-ev-nspawn.json",
        "agent": me}
for path, doc in ((req, body), (record, {"version": 1, "request_file": req, "agent": me})):
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)
print("ready", flush=True)
time.sleep(120)
"""


def _agent_with_its_own_boot_id(tmp_path: Path, boot_id: str) -> subprocess.Popen[str]:
    """The agent in a mount namespace where boot_id reads ``boot_id``: same kernel, same pid
    namespace, another boot id (as the unit's sandbox and a trainer inside nspawn see it)."""
    fake = tmp_path / "boot_id"
    fake.write_text(boot_id + "\n")
    (tmp_path / "cp").mkdir()
    userns = [] if os.geteuid() == 0 else ["--map-root-user"]
    mount = f'mount --bind {fake} /proc/sys/kernel/random/boot_id && exec "$@"'
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", *userns, "sh", "-c", mount, "sh",
         sys.executable, "-c", AGENT, str(tmp_path / "cp" / "request.json"), str(tmp_path / "agent.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.wait(timeout=30)
        assert proc.stderr is not None
        pytest.skip(f"cannot bind a boot id in a mount namespace here: {proc.stderr.read().strip()}")
    return proc


def _guard(tmp_path: Path) -> PreemptionGuard:
    return PreemptionGuard(
        signal=None, request_file=str(tmp_path / "cp" / "request.json"), rank=0, check_interval=0
    )


def test_a_live_agent_is_obeyed_whatever_its_boot_id_says(tmp_path, caplog):
    caplog.set_level(logging.INFO, "tna_client")
    theirs = str(uuid.uuid4())
    agent = _agent_with_its_own_boot_id(tmp_path, theirs)
    try:
        request = json.loads((tmp_path / "cp" / "request.json").read_text())
        # the condition is real: the writer saw another boot id, in our pid namespace, on our host
        assert request["agent"]["boot_id"] == theirs != read_boot_id()
        assert request["agent"]["pid"] == agent.pid
        assert request["agent"]["start_time_ticks"] == start_ticks(agent.pid)
        g = _guard(tmp_path)
        assert g.checkpoint_requested and g.event_id == "ev-nspawn", caplog.text
        assert g.ack(step=7)
        assert json.loads((tmp_path / "cp" / "ack-ev-nspawn.json").read_text())["step"] == 7
        record, why = read_record(str(tmp_path / "agent.json"), Node.here())
        assert record is not None and why == "", why
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=30)
    # the same request once its writer is gone: what a trainer sees of a request left from before a
    # reboot (another boot id, nobody at that pid with that start time)
    g = _guard(tmp_path)
    assert not g.checkpoint_requested
    [line] = [r.getMessage() for r in caplog.records if "ignoring checkpoint request" in r.getMessage()]
    assert "another node or before a reboot" in line and theirs[:8] in line, line
    record, why = read_record(str(tmp_path / "agent.json"), Node.here())
    assert record is None and "another node or before a reboot" in why, why


def _request(tmp_path: Path, agent: dict) -> PreemptionGuard:
    (tmp_path / "cp").mkdir(exist_ok=True)
    body = {"version": 2, "event_id": "ev-x", "state": "requested", "deadline_unix": time.time() + 300,
            "ack_path": str(tmp_path / "cp" / "ack-ev-x.json"), "agent": agent}  # fmt: skip
    (tmp_path / "cp" / "request.json").write_text(json.dumps(body))
    return _guard(tmp_path)


def test_another_nodes_request_naming_a_live_pid_here_is_refused(tmp_path, caplog):
    """Shared storage: another node's agent had the pid and start tick of a process alive here (this
    one). The first pid namespace has the same inode everywhere, so only the host name tells."""
    caplog.set_level(logging.INFO, "tna_client")
    here = identity()
    other = {**here, "boot_id": str(uuid.uuid4()), "hostname": socket.gethostname() + "-other"}
    assert not _request(tmp_path, other).checkpoint_requested
    assert "another node or before a reboot" in caplog.text
    # the same live writer named by this host: obeyed (the nspawn case above, without the mount)
    assert _request(tmp_path, {**other, "hostname": here["hostname"]}).checkpoint_requested
    # an agent old enough not to write its host name gets no benefit of the doubt
    assert not _request(tmp_path, {k: v for k, v in other.items() if k != "hostname"}).checkpoint_requested


def test_a_gone_agent_on_this_boot_is_refused(tmp_path, caplog):
    caplog.set_level(logging.INFO, "tna_client")
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ticks = start_ticks(p.pid)
    p.kill()
    p.wait()
    gone = {**identity(), "pid": p.pid, "start_time_ticks": ticks}
    assert not _request(tmp_path, gone).checkpoint_requested
    assert f"the agent that wrote it (pid {p.pid}) is gone" in caplog.text
