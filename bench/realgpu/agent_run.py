"""The installed agent, started the way an operator would (``python -m agent run --config F``) at
default settings, except what a check run must own: a temporary state and runtime folder, the TCP
port on loopback, and no cloud metadata service (there is no network). Its verdict is read from
``GET /api/v1/status``, the redacted view any neighbour may read."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_text(work: Path, port: int) -> str:
    return (
        f'[agent]\nstate_dir = "{work}/state"\nruntime_dir = "{work}/run"\nlog_format = "json"\n'
        f'[http]\nlisten = "127.0.0.1:{port}"\ncontrol_socket = "{work}/run/control.sock"\n'
        '[preemption]\nprovider = "none"\n'
    )


class Agent:
    def __init__(self, work: Path, env: dict[str, str] | None = None) -> None:
        self.work = work
        self.port = free_port()
        self.config = work / "agent.toml"
        self.config.write_text(config_text(work, self.port))
        self.output = work / "agent.log"
        paths = [str(REPO), str(REPO / "client"), os.environ.get("PYTHONPATH", "")]
        self.env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    def start(self, ready_within: float = 30.0) -> float:
        """Start it and wait for /healthz; the seconds that took."""
        t0 = time.monotonic()
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agent", "run", "--config", str(self.config)],
                cwd=REPO,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        while time.monotonic() - t0 < ready_within:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the agent exited with {self.proc.returncode}: {self.tail(20)}")
            try:
                self.get("/healthz", timeout=1)
                return time.monotonic() - t0
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"the agent did not answer /healthz within {ready_within} s: {self.tail(20)}")

    def get(self, path: str, timeout: float = 5.0) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as r:
            return r.read()

    def status(self) -> dict[str, Any]:
        return json.loads(self.get("/api/v1/status"))

    def pause(self) -> None:
        """SIGSTOP: not sampling, not scheduled; the trainer runs as without an agent."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.paused = False

    def cpu_seconds(self) -> float | None:
        """User + system CPU time of the agent so far (/proc/<pid>/stat, 10 ms ticks)."""
        if self.proc is None:
            return None
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        self.resume()  # a stopped process handles no SIGTERM
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def tail(self, lines: int) -> str:
        try:
            with open(self.output, errors="replace") as f:
                return "".join(deque(f, maxlen=lines))
        except OSError:
            return ""


def verdict_row(status: dict[str, Any]) -> dict[str, Any]:
    """The classifier's state in one status answer, compactly."""
    c = status.get("classifier") or {}
    label = c.get("verdict")
    if label and c.get("sub_reason"):
        label = f"{label}/{c['sub_reason']}"
    return {
        "label": label,
        "vote": c.get("vote"),
        "held": c.get("held"),
        "candidate": c.get("candidate"),
        "window_samples": c.get("window_samples"),
    }
