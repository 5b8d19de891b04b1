"""The suite's own guard: non-local connections fail loudly, in this process and in subprocesses."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from conftest import REPO


def test_guard_blocks_metadata_addresses_in_process(tmp_path, monkeypatch):
    log = tmp_path / "blocked.log"
    monkeypatch.setenv("TNA_NETGUARD_LOG", str(log))
    with socket.socket() as s, pytest.raises(ConnectionRefusedError, match="test network guard"):
        s.connect(("169.254.169.254", 80))  # never sent: the guard refuses it
    with pytest.raises(ConnectionRefusedError):
        socket.getaddrinfo("metadata.google.internal", 80)  # never looked up: refused
    assert "169.254.169.254" in log.read_text() and "metadata.google.internal" in log.read_text()


def test_guard_reaches_subprocesses(tmp_path):
    log = tmp_path / "blocked.log"
    # never sent: the guard refuses the connect in the child too
    code = "import socket; s = socket.socket(); s.settimeout(1); s.connect(('100.100.100.200', 80))"  # never
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "TNA_NETGUARD_LOG": str(log)},
        timeout=20,
    )
    assert out.returncode != 0 and "test network guard" in out.stderr
    assert "100.100.100.200" in log.read_text()


def test_loopback_and_test_range_allowed():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.socket() as c:
            c.connect(server.getsockname())
