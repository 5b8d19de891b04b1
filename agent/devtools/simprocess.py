"""``training-node-agent metadata-sim`` in its own process on an ephemeral loopback port, for the tests
and benchmarks that want the simulator outside their own event loop (in-process users call
:func:`agent.devtools.simulator.start_simulator`).

    sim = MetadataSimProcess(tmp / "sim.log", "aws", "--require-token")
    sim.control("/notice", {"kind": NoticeKind.SPOT_TERMINATION, "seconds": 120})
    sim.read_state()["events"]
    sim.stop()
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from agent.core.vocabulary import Cloud
from agent.devtools import REPO

_ANNOUNCED_URL = re.compile(r"metadata on (http://127\.0\.0\.1:\d+)")


class MetadataSimProcess:
    """``python -m agent metadata-sim --provider PROVIDER --listen 127.0.0.1:0 ARGS...`` with its output
    in ``log_path``; ``url`` is the base URL it announced. Raises RuntimeError (with the log) when it
    has not announced one within ``timeout`` seconds."""

    def __init__(
        self, log_path: Path, provider: str = Cloud.ALIBABA, *args: str, timeout: float = 20.0
    ) -> None:
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the simulator
        command = [sys.executable, "-m", "agent", "metadata-sim", "--provider", provider]
        self.proc = subprocess.Popen(
            [*command, "--listen", "127.0.0.1:0", *args],
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = _ANNOUNCED_URL.search(self.log())
            if m:
                self.url = m.group(1)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"metadata-sim --provider {provider} did not start:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def control(self, path: str, body: dict[str, Any] | None = None, method: str = "POST") -> Any:
        """A call to the simulator's control API (docs/preemption.md), e.g. ``/notice``, ``/cancel``."""
        data = json.dumps(body or {}).encode() if method == "POST" else None
        req = urllib.request.Request(f"{self.url}/_sim{path}", data=data, method=method)
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def read_state(self) -> dict[str, Any]:
        """``GET /_sim/state``: the events, request count and settings."""
        return self.control("/state", method="GET")

    def stop(self, grace: float = 5.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
