"""agent/trainer.py: importable with the standard library alone, and the guard's semantics."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from checkpoint_helpers import REPO

from agent.trainer import PreemptionGuard, rank_from_env

DAEMON_DEPS = ("aiohttp", "pydantic", "structlog", "prometheus_client", "pynvml", "psutil")


def test_imports_in_a_bare_interpreter(tmp_path):
    """-I -S: no site-packages, no environment, no user site; only the repository on the path."""
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); "
        "from agent.trainer import PreemptionGuard; "
        "g = PreemptionGuard(request_file='/nonexistent/request.json'); "
        "assert not g.checkpoint_requested; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {DAEMON_DEPS!r}))"
    )
    res = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
    # copied next to a training script, as a single file
    shutil.copy(REPO / "agent" / "trainer.py", tmp_path / "tna_guard.py")
    res = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import tna_guard; "
            "print(tna_guard.PreemptionGuard.__name__)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0 and res.stdout.strip() == "PreemptionGuard", res.stderr


def _write_request(path, event_id: str, state: str = "requested", seconds: float = 300.0):
    path.parent.mkdir(exist_ok=True)
    body = {
        "event_id": event_id,
        "state": state,
        "kind": "spot-termination",
        "deadline_unix": time.time() + seconds,
        "ack_path": str(path.parent / f"ack-{event_id}.json"),
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


def test_signal_sets_the_flag_and_chains(tmp_path):
    calls = []
    old = signal.signal(signal.SIGUSR2, lambda s, f: calls.append(s))
    try:
        g = PreemptionGuard(signal="USR2", request_file=str(tmp_path / "none.json"), check_interval=10)
        assert not g.checkpoint_requested
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.05)
        assert g.checkpoint_requested and g.signalled_at is not None
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
