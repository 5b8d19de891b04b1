"""tna_client: importable with the standard library alone, the guard's semantics, stale requests,
discovery, loud acks, saved-checkpoint notes."""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest
import tna_client.guard
from checkpoint_helpers import REPO
from conftest import wait_until
from tna_client import PreemptionGuard, fsync_tree, rank_from_env
from tna_client.discovery import discovery_file_for, discovery_places, locate, read_record
from tna_client.node import Node, identity, read_boot_id, stale_reason, start_ticks

from agent.ledger.saved import parse_saved

DAEMON_DEPS = ("agent", "aiohttp", "pydantic", "structlog", "prometheus_client", "pynvml", "psutil")


def test_imports_in_a_bare_interpreter():
    """-I -S: no site-packages, no environment, no user site; only client/ on the path."""
    code = (
        f"import sys; sys.path.insert(0, {str(REPO / 'client')!r}); "
        "from tna_client import PreemptionGuard; "
        "import tna_client.torch_dist, tna_client.discovery, tna_client.files; "
        "g = PreemptionGuard(request_file='/nonexistent/request.json'); "
        "assert not g.checkpoint_requested; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {DAEMON_DEPS!r}))"
    )
    res = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
    # the old import keeps working, as a re-export
    from agent.trainer import PreemptionGuard as Old

    assert Old is PreemptionGuard


def _live_agent() -> dict:
    """This test process plays the agent: alive, on this node."""
    return identity()


def _write_request(
    path, event_id: str, state: str = "requested", seconds: float = 300.0, agent: dict | None = None
):
    path.parent.mkdir(exist_ok=True)
    body = {
        "version": 2,
        "event_id": event_id,
        "state": state,
        "kind": "spot-termination",
        "deadline_unix": time.time() + seconds,
        "ack_path": str(path.parent / f"ack-{event_id}.json"),
        "agent": _live_agent() if agent is None else agent,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)


def test_request_file_ack_and_no_second_trigger(tmp_path):
    req = tmp_path / "cp" / "request.json"
    g = PreemptionGuard(signal=None, request_file=str(req), rank=0, check_interval=0)
    assert not g.checkpoint_requested and g.seconds_remaining() is None
    _write_request(req, "ev-1", seconds=120)
    assert g.checkpoint_requested and g.event_id == "ev-1"
    assert 110 < g.seconds_remaining() <= 120
    assert g.ack(step=12, path="/mnt/cpfs/ckpt-12")
    ack = json.loads((tmp_path / "cp" / "ack-ev-1.json").read_text())
    assert ack["event_id"] == "ev-1" and ack["step"] == 12 and ack["path"] == "/mnt/cpfs/ckpt-12"
    assert ack["pid"] == os.getpid() and abs(ack["at"] - time.time()) < 5
    assert not g.checkpoint_requested  # handled: the same request does not fire again
    _write_request(req, "ev-1", state="completed")
    assert not g.checkpoint_requested
    _write_request(req, "ev-2")
    assert g.checkpoint_requested and g.event_id == "ev-2"
    _write_request(req, "ev-2", state="canceled")
    assert g.canceled
    g.reset()
    assert not g.checkpoint_requested


def test_finished_or_canceled_requests_do_not_fire(tmp_path):
    req = tmp_path / "cp" / "request.json"
    for state in ("completed", "canceled", "missed"):
        _write_request(req, f"old-{state}", state=state)
        g = PreemptionGuard(signal=None, request_file=str(req), check_interval=0)
        assert not g.checkpoint_requested, state
    req.write_text("{not json")
    assert not PreemptionGuard(signal=None, request_file=str(req), check_interval=0).checkpoint_requested


def test_only_rank_zero_acks(tmp_path, monkeypatch):
    req = tmp_path / "cp" / "request.json"
    _write_request(req, "ev-r")
    g = PreemptionGuard(signal=None, request_file=str(req), rank=1, check_interval=0)
    assert g.checkpoint_requested and not g.should_save
    assert g.ack(step=3) is False and not (tmp_path / "cp" / "ack-ev-r.json").exists()
    assert not g.checkpoint_requested
    assert rank_from_env({"LOCAL_RANK": "3", "RANK": "11"}) == 11
    assert rank_from_env({"SLURM_PROCID": "2"}) == 2
    assert rank_from_env({"LOCAL_RANK": "1"}) == 1 and rank_from_env({}) == 0
    monkeypatch.setenv("RANK", "5")
    assert PreemptionGuard(signal=None, request_file=str(req)).rank == 5


def test_rank_zero_acks_a_request_it_never_polled(tmp_path):
    """A collective stop (Lightning DDP): rank 1 saw the request and every rank stops; rank 0 saves
    before its own check came round. Its ack reads the file then, and answers the live request."""
    req = tmp_path / "cp" / "request.json"
    g = PreemptionGuard(signal=None, request_file=str(req), rank=0, check_interval=3600)
    assert not g.checkpoint_requested  # checked once, before the request; the next check is an hour away
    _write_request(req, "ev-collective")
    assert g.ack(step=7, path="/mnt/cpfs/ckpt-7"), g.ack_error
    ack = json.loads((tmp_path / "cp" / "ack-ev-collective.json").read_text())
    assert ack["event_id"] == "ev-collective" and ack["step"] == 7
    assert g.seen["via"] == "file" and not g.checkpoint_requested  # answered: not pending again


def test_signal_sets_the_flag_and_chains(tmp_path):
    calls = []
    old = signal.signal(signal.SIGUSR2, lambda s, f: calls.append(s))
    try:
        g = PreemptionGuard(signal="USR2", request_file=str(tmp_path / "none.json"), check_interval=10)
        assert not g.checkpoint_requested
        os.kill(os.getpid(), signal.SIGUSR2)
        wait_until(lambda: g.checkpoint_requested, timeout=5, what="the handler to run")
        assert g.signalled_at is not None
        assert g.request is None and g.seconds_remaining() is None  # a bare signal: no deadline known
        assert calls == [signal.SIGUSR2]
        assert g.ack() is False  # nowhere to write an ack, but the flag clears
        assert not g.checkpoint_requested
        g.uninstall()
        assert signal.getsignal(signal.SIGUSR2) is not g._on_signal
    finally:
        signal.signal(signal.SIGUSR2, old)


def test_signal_name_errors():
    with pytest.raises(ValueError, match="unknown signal"):
        PreemptionGuard(signal="SIGBOGUS", install=False)


# --- stale requests: one case each ----------------------------------------------------------------


def _dead_agent() -> dict:
    """The identity of a process that really ran here and has exited."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ticks = start_ticks(p.pid)
    p.kill()
    p.wait()
    return {**identity(), "pid": p.pid, "start_time_ticks": ticks}


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("dead agent", "is gone"),
        ("passed deadline", "deadline passed"),
        ("other node", "another node or before a reboot"),
        ("live", None),
    ],
)
def test_stale_requests_are_ignored(tmp_path, caplog, case, why):
    req = tmp_path / "cp" / "request.json"
    agent, seconds = _live_agent(), 300.0
    if case == "dead agent":
        agent = _dead_agent()
    elif case == "passed deadline":
        seconds = -5.0
    elif case == "other node":
        agent = {**agent, "boot_id": "0b5e0b5e-0000-4000-8000-000000000000", "hostname": "gpu-node-99"}
    _write_request(req, f"ev-{case}", seconds=seconds, agent=agent)
    caplog.set_level(logging.INFO, "tna_client")
    g = PreemptionGuard(signal=None, request_file=str(req), rank=0, check_interval=0)
    assert g.checkpoint_requested is (why is None)
    if why is None:
        assert g.event_id == "ev-live"
        return
    assert g.request is None
    [line] = [r.getMessage() for r in caplog.records if "ignoring checkpoint request" in r.getMessage()]
    assert why in line and f"ev-{case}" in line
    assert not g.checkpoint_requested  # said once, still ignored
    assert sum("ignoring" in r.getMessage() for r in caplog.records) == 1
    # the agent comes back and rewrites the request as its own: now it is obeyed
    _write_request(req, f"ev-{case}", seconds=300.0)
    assert g.checkpoint_requested and g.event_id == f"ev-{case}"


def test_stale_reason_pure():
    node = Node(boot_id="b-1", pidns=7, hostname="h")
    now = 1000.0
    alive = {"pid": 42, "start_time_ticks": 9, "boot_id": "b-1", "pidns": 7, "hostname": "h"}
    started = {42: 9}.get
    assert stale_reason({"deadline_unix": 1001.0, "agent": alive}, now, node, started) is None
    assert "deadline" in stale_reason({"deadline_unix": 999.0, "agent": alive}, now, node, started)
    assert "gone" in stale_reason({"agent": {**alive, "start_time_ticks": 8}}, now, node, started)
    assert "gone" in stale_reason({"agent": {**alive, "pid": 43}}, now, node, started)
    # another boot id: a live writer here overrules it (a sandbox's view of /proc/sys), unless it
    # names another host; a writer that is gone was on another node or before a reboot
    assert stale_reason({"agent": {**alive, "boot_id": "b-2"}}, now, node, started) is None
    other = {**alive, "boot_id": "b-2", "hostname": "h2"}
    assert "another node" in stale_reason({"agent": other}, now, node, started)
    gone = {**alive, "boot_id": "b-2", "pid": 43}
    assert "another node" in stale_reason({"agent": gone}, now, node, started)
    assert "another node" in stale_reason({"agent": {**other, "pid": 43, "pidns": 8}}, now, node, started)
    # another pid namespace (agent on the host, trainer in a container): the pid cannot be checked
    assert stale_reason({"agent": {**alive, "pid": 43, "pidns": 8}}, now, node, started) is None
    assert stale_reason({"event_id": "old agent, version 1"}, now, node, started) is None
    assert read_boot_id() == Node.here().boot_id and read_boot_id()


# --- acks that cannot be delivered, durability, saved notes ---------------------------------------


def test_ack_that_cannot_be_delivered_is_loud(tmp_path, caplog):
    caplog.set_level(logging.INFO, "tna_client")
    g = PreemptionGuard(signal=None, request_file=str(tmp_path / "none.json"), rank=0, check_interval=0)
    g._pending = True  # a bare signal: nothing was read
    assert g.ack(step=3) is False
    assert "no request from the agent was read" in g.ack_error
    assert any(r.levelno == logging.ERROR and "NOT acknowledged" in r.getMessage() for r in caplog.records)
    req = tmp_path / "cp" / "request.json"
    _write_request(req, "ev-ro")
    os.chmod(req.parent, 0o555)
    try:
        g = PreemptionGuard(signal=None, request_file=str(req), rank=0, check_interval=0)
        assert g.checkpoint_requested
        if os.geteuid() != 0:  # root writes anywhere: the permission case needs another user
            with pytest.warns(UserWarning, match="cannot write"):
                assert g.confirm(3, None) is False
    finally:
        os.chmod(req.parent, 0o755)
    # the user's durability hook fails: no ack, a warning the integrations pass on
    _write_request(req, "ev-hook")
    g = PreemptionGuard(signal=None, request_file=str(req), rank=0, check_interval=0)
    assert g.checkpoint_requested
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.bin").write_bytes(b"x" * 100)

    def upload(path: str) -> None:
        raise ConnectionError("object store unreachable")

    with pytest.warns(UserWarning, match="object store unreachable"):
        assert g.confirm(5, str(ckpt), on_durable=upload) is False
    assert not (req.parent / "ack-ev-hook.json").exists()


def test_confirm_flushes_then_acks_and_notes_the_save(tmp_path):
    req = tmp_path / "cp" / "request.json"
    _write_request(req, "ev-ok")
    g = PreemptionGuard(signal=None, request_file=str(req), rank=0, check_interval=0)
    assert g.checkpoint_requested
    ckpt = tmp_path / "ckpt" / "checkpoint-7"
    (ckpt / "sub").mkdir(parents=True)
    for name in ("a.bin", "sub/b.bin"):
        (ckpt / name).write_bytes(os.urandom(64))
    assert fsync_tree(str(ckpt)) == 2
    uploaded = []
    assert g.confirm(7, str(ckpt), on_durable=uploaded.append, seconds=0.5)
    assert uploaded == [str(ckpt)]
    ack = json.loads((req.parent / "ack-ev-ok.json").read_text())
    assert ack["step"] == 7 and ack["path"] == str(ckpt)
    [note] = list(req.parent.glob("saved-*.json"))
    assert note.name.startswith(f"saved-{os.getpid()}-")
    body = json.loads(note.read_text())
    assert body["kind"] == "saved" and body["step"] == 7 and body["path"] == str(ckpt)
    assert body["seconds"] == 0.5 and body["pid"] == os.getpid() and body["time"].endswith("Z")
    # what the agent's goodput ledger makes of it
    rec = parse_saved(note.read_bytes(), time.time())
    assert (rec.step, rec.path, rec.seconds, rec.pid) == (7, str(ckpt), 0.5, os.getpid())
    assert abs(rec.time - time.time()) < 60
    assert not [p for p in req.parent.iterdir() if p.name.startswith(".")]  # no temp file left
    # rank 1: no note, no ack, the flag clears
    g1 = PreemptionGuard(signal=None, request_file=str(req), rank=1, check_interval=0)
    assert g1.saved(8, "/x") is False and len(list(req.parent.glob("saved-*.json"))) == 1


# --- finding the agent ----------------------------------------------------------------------------


def _record(path, request_file, agent=None, mode=0o755):
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, mode)
    rec = {"version": 1, "request_file": str(request_file), "agent": agent or _live_agent()}
    path.write_text(json.dumps(rec))
    return path


def test_fixed_places_for_root_and_other_users():
    assert discovery_file_for(0) == "/run/training-node-agent/agent.json"
    assert discovery_file_for(1000) == "/tmp/training-node-agent-1000/agent.json"
    places = discovery_places(uid=1000)
    assert places[:2] == ["/run/training-node-agent/agent.json", "/tmp/training-node-agent-1000/agent.json"]
    assert discovery_places(uid=0)[0] == "/run/training-node-agent/agent.json"
    assert "/tmp/training-node-agent-0/agent.json" not in discovery_places(uid=0)


def test_discovery_order_and_trust(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("TNA_CHECKPOINT_REQUEST_FILE", raising=False)
    node = Node.here()
    dead = _record(tmp_path / "a" / "agent.json", "/dead/request.json", agent=_dead_agent())
    live = _record(tmp_path / "b" / "agent.json", tmp_path / "b" / "cp" / "request.json")
    loc = locate(places=[str(dead), str(live)], node=node, default=None)
    assert loc.request_file == str(tmp_path / "b" / "cp" / "request.json") and loc.via == str(live)
    assert "stale" in loc.looked[0] and "is gone" in loc.looked[0]
    # the environment variable overrides discovery
    monkeypatch.setenv("TNA_CHECKPOINT_REQUEST_FILE", "/env/request.json")
    assert locate(places=[str(live)], node=node).request_file == "/env/request.json"
    monkeypatch.delenv("TNA_CHECKPOINT_REQUEST_FILE")
    # a record in a directory anyone can write is not trusted
    open_dir = _record(tmp_path / "c" / "agent.json", "/planted/request.json", mode=0o777)
    rec, why = read_record(str(open_dir), node)
    assert rec is None and "writable by others" in why
    # nothing found: said once, on rank 0 only, naming where it looked. The fallback default is one
    # of this test's own: the host's /run/training-node-agent/checkpoint may exist (a root agent ran)
    absent = str(tmp_path / "none" / "request.json")
    monkeypatch.setattr(tna_client.guard, "locate", functools.partial(locate, default=absent))
    caplog.set_level(logging.INFO, "tna_client")
    for rank in (1, 0):
        g = PreemptionGuard(signal=None, rank=rank, discovery_files=[str(open_dir)], check_interval=0)
        assert not g.found and g.request_file is None
        g._discover()
        g.uninstall()
    said = [r.getMessage() for r in caplog.records if "no training-node-agent found" in r.getMessage()]
    assert len(said) == 1 and str(open_dir) in said[0]
    # found: the trainer leaves a note beside the request file, and takes it back
    g = PreemptionGuard(signal=None, rank=0, discovery_files=[str(live)], check_interval=0)
    assert g.found and g.located.via == str(live)
    (tmp_path / "b" / "cp").mkdir()
    g._discover()  # same file: no second note; the directory did not exist the first time
    g2 = PreemptionGuard(signal=None, rank=0, discovery_files=[str(live)], check_interval=0)
    note = tmp_path / "b" / "cp" / f"trainer-{os.getpid()}.json"
    assert json.loads(note.read_text())["pid"] == os.getpid()
    g2.uninstall()
    assert not note.exists()
