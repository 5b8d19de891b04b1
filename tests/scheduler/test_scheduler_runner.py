"""The scontrol runner's failures and the health-check's deadline, on real processes: a command
that is missing, one that runs past the timeout (sleep), one that fails (false); a control socket
that accepts and never answers."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from conftest import run_cli

from agent.sources.jobs.scontrol import Scontrol, SlurmError


async def test_missing_slow_and_failing_commands_are_one_line_errors() -> None:
    s = Scontrol(timeout=0.5)
    with pytest.raises(SlurmError, match="not found"):
        await s.run(["/nonexistent/scontrol", "show", "node"])
    t0 = time.monotonic()
    with pytest.raises(SlurmError, match=r"longer than 0\.5s"):
        await s.run(["sleep", "30"])
    assert time.monotonic() - t0 < 5
    with pytest.raises(SlurmError, match=r"failed \(1\)"):
        await s.run(["false"])
    assert (await s.run(["echo", "NodeName=x"])).strip() == "NodeName=x"


async def test_an_argument_is_never_split_or_interpreted(tmp_path: Path) -> None:
    # reasons travel as one argv element: no shell sees them
    said = await Scontrol(timeout=5).run(["printf", "%s|", "reason=tna: a; rm -rf / $(id)"])
    assert said == "reason=tna: a; rm -rf / $(id)|"


def test_health_check_gives_up_after_5_s_on_a_silent_agent(tmp_path: Path) -> None:
    path = str(tmp_path / "silent.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])  # accepted, never answered
            except TimeoutError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        r = run_cli("health-check", "--control-socket", path, timeout=30)
        took = time.monotonic() - t0
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().count("\n") == 0 and "did not answer" in r.stderr and "5s" in r.stderr
        assert 4.5 <= took < 15, took
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()
    r = run_cli("health-check", "--control-socket", str(tmp_path / "none.sock"), timeout=30)
    assert r.returncode == 2 and "no agent control socket" in r.stderr
