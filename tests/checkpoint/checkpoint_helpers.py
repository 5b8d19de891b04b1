"""Real processes for the checkpoint tests: the toy trainer, a process with no handler, and a
small client for the agent's control socket."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import REPO, wait_until


class Trainer:
    """``python -m agent.devtools.demo_trainer`` with its own checkpoint dir (also its cmdline marker)."""

    def __init__(self, tmp: Path, name: str, request_file: Path | None, *args: str, env=None) -> None:
        self.dir = tmp / f"ckpt-{name}"
        self.events_path = tmp / f"events-{name}.jsonl"
        self.log_path = tmp / f"trainer-{name}.log"
        cmd = [sys.executable, "-m", "agent.devtools.demo_trainer", "--checkpoint-dir", str(self.dir)]
        cmd += ["--events", str(self.events_path), "--step-seconds", "0.02", "--print-every", "1000"]
        if request_file is not None:
            cmd += ["--request-file", str(request_file)]
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*cmd, *args],
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        wait_until(lambda: self.events("started") or self.proc.poll() is not None, what="trainer start")
        assert self.proc.poll() is None, self.log()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def marker(self) -> str:
        """A ``cmdline:`` regex matching this process only."""
        return re.escape(str(self.dir))

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        try:
            lines = self.events_path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = [json.loads(x) for x in lines if x.strip()]
        return [e for e in out if kind is None or e["event"] == kind]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._log.close()


def idle_process(marker: str, handler: str | None = None) -> subprocess.Popen[bytes]:
    """A process with (``handler="SIGUSR1"``) or without a handler, matching ``cmdline:marker``."""
    code = "import signal, sys, time\n"
    if handler:
        code += f"signal.signal(signal.{handler}, lambda *a: print('got', flush=True))\n"
    code += "print('ready', flush=True)\ntime.sleep(120)\n"
    # unbuffered: a test selects on the pipe for the handler's "got", and a buffered reader that took
    # "got" in with "ready" would leave select waiting for bytes it already holds
    p = subprocess.Popen([sys.executable, "-c", code, marker], stdout=subprocess.PIPE, bufsize=0)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == b"ready"
    return p


def control(agent, method: str, path: str, payload: Any = None, timeout: float = 60) -> tuple[int, Any]:
    from agent.runtime.control import control_request

    return asyncio.run(control_request(agent.control_socket, method, path, payload, timeout=timeout))


def cli(agent, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args, "--config", str(agent.config_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def recent_events(agent, type_: str = "checkpoint") -> list[dict[str, Any]]:
    code, body = control(agent, "GET", "/events")
    assert code == 200, body
    return [e for e in body if e.get("type") == type_]


def metric(text: str, name: str, labels: str = "") -> float | None:
    for line in text.splitlines():
        if line.startswith(name + (f"{{{labels}}}" if labels else "")) and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            if head == name + (f"{{{labels}}}" if labels else ""):
                return float(value)
    return None
