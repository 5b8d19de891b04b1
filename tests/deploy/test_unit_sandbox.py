"""The agent inside the unit's sandbox. systemd is not PID 1 on the test machines, so the unit cannot be
started for real; instead unit_sandbox.py installs the unit's own seccomp policies (SystemCallFilter,
MemoryDenyWriteExecute, RestrictAddressFamilies, NoNewPrivileges) as systemd would, and setpriv
leaves only CAP_KILL. The real daemon must then still read its fake GPUs through nvidia-ml-py's
ctypes binding, deliver a webhook, serve /metrics and the control socket, and stop cleanly."""

from __future__ import annotations

import ast
import ctypes.util
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO, _unavailable, free_port, http_get, need_binary, write_toml

from agent.devtools.fake_nvml import FakeNvml, device, library_dir

UNIT = REPO / "systemd" / "training-node-agent.service"
SANDBOX = Path(__file__).with_name("unit_sandbox.py")
CAP_KILL = 1 << 5
CAP_SYSLOG = 1 << 34

PROBE = r"""
import ctypes, errno, mmap, os, resource, socket
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
attempt("wx_mmap", lambda: mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC))
attempt("rx_mmap", lambda: mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC))
for fam in ("AF_NETLINK", "AF_PACKET", "AF_INET", "AF_INET6", "AF_UNIX"):
    kind = socket.SOCK_RAW if fam == "AF_PACKET" else socket.SOCK_DGRAM
    attempt(fam, lambda: socket.socket(getattr(socket, fam), kind).close())
attempt("sched_setaffinity", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
attempt("kill_other_user", lambda: os.kill(int(os.environ["TARGET_PID"]), 0))
def kmsg():
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        os.read(fd, 8192)
    finally:
        os.close(fd)
attempt("kmsg_read", kmsg)
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
out["CapEff"] = int(status["CapEff"], 16)
out["CapBnd"] = int(status["CapBnd"], 16)
out["NoNewPrivs"] = status["NoNewPrivs"].strip()
out["Seccomp_filters"] = int(status.get("Seccomp_filters", "0"))
try:
    out["ctypes_callback"] = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda x: x + 1)(41)
except Exception as e:
    out["ctypes_callback"] = repr(e)
print(repr(out))
"""


def sandbox_prefix() -> list[str]:
    """setpriv down to CAP_KILL (and the nobody user where this interpreter is readable by it), then
    the unit's seccomp policies."""
    need_binary("systemd-analyze", "systemd")
    setpriv = need_binary("setpriv", "util-linux")
    if ctypes.util.find_library("seccomp") is None:
        _unavailable("libseccomp.so.2 not found (Debian package libseccomp2)")
    caps = [
        "--inh-caps=-all,+kill,+syslog",
        "--ambient-caps=-all,+kill,+syslog",
        "--bounding-set=-all,+kill,+syslog",
    ]
    user: list[str] = []
    if os.geteuid() == 0 and _nobody_can_run_python(setpriv):
        user = ["--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    return [setpriv, *user, *caps, sys.executable, str(SANDBOX), str(UNIT), "--"]


def _nobody_can_run_python(setpriv: str) -> bool:
    """Whether nobody may execute this interpreter (not so for one under a 0700 /root). The exec
    happens from a shell that already is nobody: setpriv's own exec still holds root's capabilities."""
    as_nobody = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/bin/sh", "-c"]
    r = subprocess.run(
        [*as_nobody, 'exec "$0" -c "import agent"', sys.executable], capture_output=True, cwd=REPO
    )
    return r.returncode == 0


def probe(prefix: list[str], target_pid: int) -> dict:
    r = subprocess.run(
        [*prefix, sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env={**os.environ, "TARGET_PID": str(target_pid)},
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return ast.literal_eval(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def other_users_process():
    """A process of another user (uid 4242) that only CAP_KILL lets us signal."""
    p = subprocess.Popen(["setpriv", "--reuid=4242", "--regid=4242", "--clear-groups", "sleep", "60"])
    yield p
    p.kill()
    p.wait()


def test_the_sandbox_enforces_the_unit(other_users_process) -> None:
    prefix = sandbox_prefix()
    inside = probe(prefix, other_users_process.pid)
    who = "as nobody" if "--reuid=nobody" in prefix else "as uid 0 (nobody cannot run this interpreter)"
    print(f"\ninside the unit's sandbox, {who}, capabilities CAP_KILL and CAP_SYSLOG only: {inside}")
    assert inside["wx_mmap"] == "EPERM"  # MemoryDenyWriteExecute
    assert inside["rx_mmap"] == "ok"
    assert inside["AF_NETLINK"] == inside["AF_PACKET"] == "EAFNOSUPPORT"  # RestrictAddressFamilies
    assert inside["AF_INET"] == inside["AF_INET6"] == inside["AF_UNIX"] == "ok"
    assert inside["sched_setaffinity"] == "EPERM"  # SystemCallFilter=~@resources
    assert inside["CapBnd"] == CAP_KILL | CAP_SYSLOG and inside["CapEff"] in (0, CAP_KILL | CAP_SYSLOG)
    assert inside["kill_other_user"] == "ok"  # CAP_KILL (ambient for a non-root user)
    assert inside["kmsg_read"] == "ok"  # CAP_SYSLOG, through kernel.dmesg_restrict=1
    assert inside["NoNewPrivs"] == "1" and inside["Seccomp_filters"] >= 3
    # inside["ctypes_callback"] tells whether ctypes callbacks (libffi closures) survive W^X with this
    # libffi (3.4's static trampolines do); not asserted: nvidia-ml-py makes foreign calls only, and
    # the agent test below shows those work

    outside = probe([], other_users_process.pid)  # the control: the same probe without the sandbox
    assert (
        outside["wx_mmap"] == "ok" and outside["AF_NETLINK"] == "ok" and outside["sched_setaffinity"] == "ok"
    )
    # and without CAP_KILL the signal to another user's process is refused
    no_kill = [prefix[0], "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all"]
    if "--reuid=nobody" in prefix:
        no_kill += ["--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    bare = probe(no_kill, other_users_process.pid)
    assert bare["kill_other_user"] == "EPERM"
    # and without CAP_SYSLOG the kernel log is refused where dmesg_restrict is on
    if Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1":
        assert bare["kmsg_read"] == "EPERM"


class _Receiver(http.server.BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", 0))
        type(self).bodies.append(json.loads(self.rfile.read(n)))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


def test_agent_works_inside_the_unit_sandbox(tmp_path: Path) -> None:
    prefix = sandbox_prefix()
    lib = library_dir()
    nvml = FakeNvml(
        tmp_path / "nvml.json", gpus=[device(0, utilization_gpu=91), device(1, utilization_gpu=37)]
    )
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    port = free_port()
    run = tmp_path / "run"
    cfg = write_toml(
        tmp_path / "agent.toml",
        {
            "agent": {"interval": "200ms", "state_dir": str(tmp_path / "state"), "runtime_dir": str(run)},
            "http": {"listen": f"127.0.0.1:{port}", "control_socket": str(run / "control.sock")},
            "preemption": {"provider": "none"},
            # "localhost": getaddrinfo() must resolve it without a netlink socket
            "alerts": {
                "webhooks": [
                    {"name": "ops", "type": "webhook", "url": f"http://localhost:{receiver.server_port}/hook"}
                ]
            },
        },
    )
    for p in (tmp_path, tmp_path / "nvml.json", cfg):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    if "--reuid=nobody" in prefix:
        for d in (tmp_path / "state", run):
            d.mkdir()
            os.chown(d, 65534, 65534)
    log = tmp_path / "agent.log"
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(lib),
        "FAKE_NVML_STATE": str(nvml.path),
        "PYTHONUNBUFFERED": "1",
    }
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "agent", "run", "--config", str(cfg)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def metrics() -> str:
            try:
                code, body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
            except OSError:
                return ""
            return body if code == 200 else ""

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and 'training_node_gpu_utilization_ratio{gpu="1"' not in metrics():
            assert proc.poll() is None, log.read_text()
            time.sleep(0.2)
        text = metrics()
        # the driver's buffer time-weighted over the tick: 91% to within a sample's timestamp jitter
        util = re.search(r'^training_node_gpu_utilization_ratio\{gpu="0",.*\} ([\d.e-]+)$', text, re.M)
        assert util and abs(float(util.group(1)) - 0.91) < 0.005, (text, log.read_text())
        assert 'training_node_collector_success{collector="gpu"} 1.0' in text
        assert 'training_node_collector_success{collector="host"} 1.0' in text

        # the Xid event thread (an NVML event set) works in the sandbox too
        nvml.add_xid(1, 79)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and 'xid="79"' not in metrics():
            time.sleep(0.2)
        assert 'xid="79"' in metrics(), log.read_text()

        # the webhook went out over TCP to "localhost"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not _Receiver.bodies:
            time.sleep(0.2)
        assert _Receiver.bodies, log.read_text()

        # the control socket answers the CLI (outside the sandbox)
        st = subprocess.run(
            [
                sys.executable,
                "-m",
                "agent",
                "status",
                "--json",
                "--control-socket",
                str(run / "control.sock"),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert st.returncode == 0, st.stderr
        assert json.loads(st.stdout)["healthy"] is True

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        receiver.shutdown()
    text = log.read_text()
    print(f"\nagent log head under the sandbox:\n{text[:600]}")
    assert "unit_sandbox: NoNewPrivileges, MemoryDenyWriteExecute" in text
    assert "Operation not permitted" not in text and "EPERM" not in text
