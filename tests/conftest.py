"""Fixtures shared by the whole suite: free ports, the shared kernel fixtures, and the real daemon
run as a subprocess (the way systemd runs it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
KERNEL_FIXTURES = REPO / "tests" / "fixtures"  # real /proc and /sys trees; see its README
NETGUARD_DIR = Path(__file__).resolve().parent / "netguard"


def pytest_configure(config: pytest.Config) -> None:
    """Guard this process and every Python subprocess against any non-local connection."""
    import tempfile

    log = Path(tempfile.mkdtemp(prefix="tna-netguard-")) / "blocked.log"
    log.touch()
    os.environ["TNA_NETGUARD_LOG"] = str(log)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(NETGUARD_DIR), os.environ.get("PYTHONPATH")])
    )
    sys.path.insert(0, str(NETGUARD_DIR))
    import sitecustomize  # noqa: F401  (the guard installs its audit hook on import)

    config._tna_netguard_log = log  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    log = getattr(session.config, "_tna_netguard_log", None)
    if log is not None and log.exists() and log.read_text().strip():
        print("\nNETWORK GUARD: the suite tried to reach non-local addresses:\n" + log.read_text())
        session.exitstatus = 1
    harness = sys.modules.get("lab.harness")
    if harness is not None and harness.EVERY_RUN:  # a lab ran: every run's verdicts in one matrix
        from lab.scoring import render

        out = REPO / "bench" / "out" / "lab_matrix.txt"
        out.parent.mkdir(exist_ok=True)
        out.write_text(render(harness.EVERY_RUN) + "\n")
        print(f"\nevery lab run of this session in one confusion matrix: {out}")


def _shares_the_lab(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("shared_lab") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files with a test marked ``slow`` come first, so the side-by-side phase starts its longest
    files first instead of ending on them (xdist's loadfile hands files out in this order: make test
    turns its reordering by test count off, which put a one-test 80 s file last). The modules marked
    ``shared_lab`` run one after another, where the first of them stands, so one lab and agent
    serves them all (tests/labagent.py) and stops after the last."""
    slow = {i.path for i in items if i.get_closest_marker("slow") is not None}
    items.sort(key=lambda i: i.path not in slow)  # stable: each file's tests keep their order
    shared = [i for i in items if _shares_the_lab(i)]
    if shared:
        first = items.index(shared[0])
        rest = [i for i in items if not _shares_the_lab(i)]
        items[:] = rest[:first] + shared + rest[first:]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if _shares_the_lab(item) and not _shares_the_lab(nextitem):
        import labagent

        labagent.close_shared_lab()


@pytest.fixture
def shared_lab(tmp_path_factory: pytest.TempPathFactory):
    """The lab and agent the ``shared_lab`` modules share, started on first use."""
    import labagent

    return labagent.shared_lab(lambda: tmp_path_factory.mktemp("shared-lab"))


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range: a port the kernel handed out
    (bind to 0) is in the range every outgoing connection draws from, so between this pick and the
    agent's bind a neighbour test's connection could take it (seen: "address already in use")."""
    low = 20000
    try:
        high = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]) - 1
    except (OSError, ValueError, IndexError):
        high = 32767
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(low, max(low, high))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a crowded range: whatever the kernel gives
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def kernel_fixtures() -> Path:
    return KERNEL_FIXTURES


def http_get(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def unix_get(socket_path: str, path: str, timeout: float = 5.0) -> tuple[int, str]:
    """GET over the agent's control socket (HTTP on a unix socket)."""
    import http.client

    class Conn(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(socket_path)

    conn = Conn("agent", timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


class _Poll:
    """One condition polled until a deadline: ``done()`` checks it once, and raises at the deadline."""

    def __init__(self, predicate: Callable[[], Any], timeout: float, what: str, detail) -> None:
        self.predicate, self.timeout, self.what, self.detail = predicate, timeout, what, detail
        self.deadline = time.monotonic() + timeout
        self.last: Any = None

    def done(self) -> bool:
        self.last = self.predicate()
        if self.last:
            return True
        if time.monotonic() >= self.deadline:
            raise AssertionError(
                f"timed out after {self.timeout}s waiting for {self.what}; last={self.last!r}"
                + (f"\n{self.detail()}" if self.detail else "")
            )
        return False


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 15.0,
    interval: float = 0.05,
    what: str = "condition",
    detail: Callable[[], str] | None = None,
) -> Any:
    """Poll ``predicate`` until it returns something true, and return that. After ``timeout`` seconds:
    AssertionError with the last value, and ``detail()`` (a log) when given."""
    poll = _Poll(predicate, timeout, what, detail)
    while not poll.done():
        time.sleep(interval)
    return poll.last


async def async_wait_until(
    predicate: Callable[[], Any],
    timeout: float = 15.0,
    interval: float = 0.02,
    what: str = "condition",
    detail: Callable[[], str] | None = None,
) -> Any:
    """:func:`wait_until` for async tests: polls between awaits, so the loop under test keeps running."""
    poll = _Poll(predicate, timeout, what, detail)
    while not poll.done():
        await asyncio.sleep(interval)
    return poll.last


def run_cli(
    *args: str, timeout: float = 30, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``training-node-agent ARGS`` as a subprocess of this interpreter, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        env=env,
    )


def toml_key(k: str) -> str:
    """A bare key where TOML allows one, else quoted ("ecs.gn8v.48xlarge" is one key, not three)."""
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def write_toml(path: Path, data: dict[str, dict[str, object]]) -> Path:
    """Plain two-level TOML writer for test configs ([section] key = value; lists of tables as
    ``[[section.name]]`` when a value is a list of dicts)."""
    lines: list[str] = []
    for section, values in data.items():
        tables = {k: v for k, v in values.items() if isinstance(v, list) and v and isinstance(v[0], dict)}
        lines.append(f"[{section}]")
        for k, v in values.items():
            if k not in tables:
                lines.append(f"{k} = {toml_value(v)}")
        for k, items in tables.items():
            for item in items:
                lines.append(f"[[{section}.{k}]]")
                lines.extend(f"{ik} = {toml_value(iv)}" for ik, iv in item.items())
        lines.append("")
    path.write_text("\n".join(lines))
    return path


class AgentProcess:
    """The real daemon in a subprocess on an ephemeral port, with its own state dir."""

    def __init__(self, tmp: Path, config: dict[str, dict[str, object]], env: dict[str, str] | None = None):
        self.tmp = tmp
        self.port = free_port()
        self.state_dir = tmp / "state"
        cfg = {k: dict(v) for k, v in config.items()}
        agent = cfg.setdefault("agent", {})
        agent.setdefault("interval", "200ms")
        agent.setdefault("state_dir", str(self.state_dir))
        agent.setdefault("runtime_dir", str(tmp / "run"))
        agent.setdefault("log_format", "json")
        http = cfg.setdefault("http", {})
        http.setdefault("listen", f"127.0.0.1:{self.port}")
        http.setdefault("control_socket", str(tmp / "run" / "control.sock"))
        # never the fixed place trainers look at: several test agents run at once
        cfg.setdefault("trainer", {}).setdefault("discovery_file", str(tmp / "run" / "agent.json"))
        pre = cfg.setdefault("preemption", {})
        pre.setdefault("provider", "none")  # never the real metadata service
        self.control_socket = str(http["control_socket"])
        self.config_path = write_toml(tmp / "agent.toml", cfg)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.log_path = tmp / "agent.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait: bool = True) -> AgentProcess:
        self._log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent", "run", "--config", str(self.config_path)],
            cwd=REPO,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        # a condition, not a sleep: a loaded box (CI beside stress-ng, xdist workers) can take
        # 20 s to start an interpreter and import the daemon; a quiet one serves in about 1 s
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited {self.proc.returncode}:\n{self.log()}")
            with contextlib.suppress(OSError):
                code, _ = http_get(self.url + "/healthz", timeout=1)
                if code in (200, 503):
                    return
            time.sleep(0.1)
        raise AssertionError(f"agent not serving after {timeout}s:\n{self.log()}")

    def get(self, path: str, **kw: object) -> tuple[int, str]:
        return http_get(self.url + path, **kw)  # type: ignore[arg-type]

    def status(self) -> dict:
        """The full status, from the control socket (the TCP port serves only the network view)."""
        code, body = unix_get(self.control_socket, "/status")
        assert code == 200, body
        return json.loads(body)

    def tcp_status(self) -> dict:
        code, body = self.get("/api/v1/status")
        assert code == 200, body
        return json.loads(body)

    def metrics(self) -> str:
        code, body = self.get("/metrics")
        assert code == 200, body
        return body

    def wait_for(self, predicate, timeout: float = 15.0, interval: float = 0.1, what: str = "condition"):
        return wait_until(predicate, timeout, interval, what, lambda: f"--- agent log ---\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except OSError:
            return ""

    def log_lines(self) -> list[dict]:
        out = []
        for line in self.log().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
        return out

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 6.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"agent did not stop within {timeout}s\n{self.log()}") from None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def agent_factory(tmp_path: Path) -> Iterator:
    """``agent_factory(config_dict, env=None, name="a")`` -> a started :class:`AgentProcess`."""
    started: list[AgentProcess] = []

    def make(
        config: dict | None = None, env: dict[str, str] | None = None, name: str = "agent", start: bool = True
    ) -> AgentProcess:
        d = tmp_path / name
        d.mkdir(exist_ok=True)
        a = AgentProcess(d, config or {}, env)
        started.append(a)
        return a.start() if start else a

    yield make
    for a in started:
        if a.proc is not None and a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait()
        if getattr(a, "_log", None):
            a._log.close()


def _unavailable(reason: str) -> None:
    # CI installs everything and runs as root: there a missing prerequisite is a failure, not a skip
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must provide this: {reason}")
    pytest.skip(reason)


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        _unavailable(f"needs root for {what}")


def need_binary(name: str, package: str) -> str:
    path = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    if path is None:
        _unavailable(f"{name} not found (Debian package {package}; .ci/run installs it)")
    return path  # type: ignore[return-value]


def part_context(cfg: Any, bus: Any, state_dir: Path, listeners: list | None = None) -> Any:
    """The Context a part is built with, outside a daemon: no snapshot yet, the runtime folder under
    ``state_dir``, the snapshot listeners in ``listeners`` (the test feeds them)."""
    from agent.context import Context
    from agent.snapshot import NodeSnapshot

    return Context(
        cfg=cfg,
        bus=bus,
        latest=lambda: NodeSnapshot(seq=0, timestamp=0.0, monotonic=0.0),
        state_dir=state_dir,
        runtime_dir=state_dir / "run",
        snapshot_listeners=[] if listeners is None else listeners,
    )
