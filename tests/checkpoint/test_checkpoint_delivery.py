"""Discovery and safe signalling against real processes, real cgroups and a real pid reuse."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from checkpoint_helpers import REPO, idle_process
from conftest import need_binary, need_root, wait_until

from agent.checkpoint.signals import deliver, handler_state
from agent.checkpoint.targets import Discovery, Target, read_pid_stat
from agent.core.vocabulary import DeliveryOutcome

CGROUP = Path("/sys/fs/cgroup")


def _target(p: subprocess.Popen) -> Target:
    st = read_pid_stat("/proc", p.pid)
    assert st is not None
    return Target(p.pid, st.start_time, st.comm, "test")


def _got(p: subprocess.Popen, timeout: float = 3.0) -> bool:
    """Whether the idle process prints 'got' (its SIGUSR1 handler ran) within ``timeout``."""
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    return bool(ready) and p.stdout.readline().strip() == b"got"


def test_discovery_combines_pidfile_cmdline_and_nvml(tmp_path):
    a = idle_process(f"{tmp_path}/job-a")
    b = idle_process(f"{tmp_path}/job-b")
    zombie = subprocess.Popen([sys.executable, "-c", "pass", f"{tmp_path}/job-z"])
    try:
        wait_until(lambda: (read_pid_stat("/proc", zombie.pid) or object()).__getattribute__("state") == "Z")
        (tmp_path / "a.pid").write_text(f"{a.pid}\n")
        (tmp_path / "bad.pid").write_text("not a pid\n")
        d = Discovery(
            [
                f"pidfile:{tmp_path}/a.pid",
                f"pidfile:{tmp_path}/bad.pid",
                f"pidfile:{tmp_path}/missing.pid",
                f"cmdline:{tmp_path}/job-",
                "nvml",
            ],
            gpu_pids=lambda: [b.pid, 999_999_999],  # a pid NVML reports but that is gone
        )
        found = d.discover()
        by_pid = {t.pid: t for t in found.targets}
        assert set(by_pid) == {a.pid, b.pid}  # the zombie and the vanished pid are left out
        assert by_pid[a.pid].source == "pidfile+cmdline"
        assert by_pid[b.pid].source == "cmdline+nvml"
        assert by_pid[a.pid].start_time_ticks == read_pid_stat("/proc", a.pid).start_time
        assert found.problems == (
            f"pidfile:{tmp_path}/bad.pid: does not hold a pid ('not a pid')",
            f"pidfile:{tmp_path}/missing.pid: not found or unreadable",
        )
        # the agent never targets itself, even when its own command line matches
        assert os.getpid() not in {t.pid for t in Discovery(["cmdline:pytest|python"]).discover().targets}
    finally:
        for p in (a, b, zombie):
            p.kill()
            p.wait()


@pytest.fixture
def cgroups():
    """Fresh cgroups (v1 pids controller and the v2 unified tree); processes moved out and the
    groups removed afterwards."""
    need_root("creating cgroups")
    made: list[Path] = []

    def make(parent: Path, name: str) -> Path:
        if not parent.is_dir():
            pytest.skip(f"{parent} is not mounted")
        d = parent / name
        d.mkdir()
        made.append(d)
        return d

    yield make
    for d in reversed(made):
        for pid in (d / "cgroup.procs").read_text().split():
            root = d.parent
            while (root.parent / "cgroup.procs").exists() and root != root.parent:
                root = root.parent
            try:
                (root / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        d.rmdir()


def test_discovery_by_cgroup_v1_v2_and_systemd_unit(tmp_path, cgroups):
    name = f"tna-test-{uuid.uuid4().hex[:8]}"
    top = cgroups(CGROUP / "pids", name)
    child = cgroups(top, "rank1")
    unit = cgroups(CGROUP / "unified", f"{name}.service")
    a, b, c = (idle_process(f"{tmp_path}/cg-{i}") for i in "abc")
    try:
        (top / "cgroup.procs").write_text(str(a.pid))
        (child / "cgroup.procs").write_text(str(b.pid))
        (unit / "cgroup.procs").write_text(str(c.pid))
        # a path inside the hierarchy, looked up under every mounted hierarchy; children included
        assert {t.pid for t in Discovery([f"cgroup:/{name}"]).discover().targets} == {a.pid, b.pid}
        # the cgroup directory itself
        assert {t.pid for t in Discovery([f"cgroup:{child}"]).discover().targets} == {b.pid}
        # a v2 group, found by path and by unit name (read from /proc/<pid>/cgroup, no D-Bus)
        assert {t.pid for t in Discovery([f"cgroup:/{name}.service"]).discover().targets} == {c.pid}
        assert {t.pid for t in Discovery([f"systemd-unit:{name}"]).discover().targets} == {c.pid}
        missing = Discovery([f"cgroup:/{name}-absent"]).discover()
        assert missing.targets == () and missing.problems == (f"cgroup:/{name}-absent: no such cgroup",)
    finally:
        for p in (a, b, c):
            p.kill()
            p.wait()


def test_signal_only_with_a_handler(tmp_path):
    ready = idle_process(f"{tmp_path}/x", handler="SIGUSR1")
    bare = idle_process(f"{tmp_path}/y")
    ignoring = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal,time; signal.signal(signal.SIGUSR1, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    assert ignoring.stdout.readline().strip() == b"ready"
    try:
        assert handler_state("/proc", ready.pid, signal.SIGUSR1) == "handler"
        assert handler_state("/proc", bare.pid, signal.SIGUSR1) == "no-handler"
        assert handler_state("/proc", bare.pid, signal.SIGWINCH) == "harmless"  # default: ignored

        d = deliver(_target(bare), signal.SIGUSR1)
        assert d.outcome == DeliveryOutcome.NO_HANDLER and "would kill it" in d.detail
        assert deliver(_target(ignoring), signal.SIGUSR1).outcome == DeliveryOutcome.IGNORED
        assert deliver(_target(ready), signal.SIGUSR1, dry_run=True).outcome == DeliveryOutcome.DRY_RUN
        assert bare.poll() is None and ignoring.poll() is None

        assert deliver(_target(ready), signal.SIGUSR1).outcome == DeliveryOutcome.SIGNALLED
        assert _got(ready)
    finally:
        for p in (ready, bare, ignoring):
            p.kill()
            p.wait()


def test_several_targets_one_exits_between_discovery_and_signal(tmp_path):
    procs = [idle_process(f"{tmp_path}/many-{i}", handler="SIGUSR1") for i in range(3)]
    try:
        found = Discovery([f"cmdline:{tmp_path}/many-"]).discover()
        assert len(found.targets) == 3
        procs[1].kill()
        procs[1].wait()  # reaped: the pid is free
        outcomes = [deliver(t, signal.SIGUSR1).outcome for t in found.targets]
        assert outcomes == [DeliveryOutcome.SIGNALLED, DeliveryOutcome.GONE, DeliveryOutcome.SIGNALLED]
        assert _got(procs[0]) and _got(procs[2])
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_different_start_time_is_never_signalled(tmp_path):
    """The identity check on its own: the same pid with another start time is another process."""
    p = idle_process(f"{tmp_path}/z", handler="SIGUSR1")
    try:
        t = _target(p)
        forged = Target(t.pid, t.start_time_ticks - 1, t.comm, "test")
        d = deliver(forged, signal.SIGUSR1)
        assert d.outcome == DeliveryOutcome.REUSED and f"not {t.start_time_ticks - 1}" in d.detail
        assert not _got(p, timeout=0.5)
    finally:
        p.kill()
        p.wait()


REUSE_SCRIPT = textwrap.dedent(
    """
    import json, signal, subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from agent.checkpoint.signals import deliver
    from agent.checkpoint.targets import Target, read_pid_stat

    CODE = ("import signal, time; signal.signal(signal.SIGUSR1, lambda *a: print('got', flush=True)); "
            "print('ready', flush=True); time.sleep(30)")

    def spawn(tag):
        p = subprocess.Popen([sys.executable, "-c", CODE, tag], stdout=subprocess.PIPE)
        p.stdout.readline()
        st = read_pid_stat("/proc", p.pid)
        return p, Target(p.pid, st.start_time, st.comm, "test")

    a, target_a = spawn("A")
    a.kill(); a.wait()
    time.sleep(0.05)  # more than one clock tick, so the newcomer's start time differs
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(a.pid - 1))  # the next process in this namespace gets a's pid
    b, target_b = spawn("B")
    stale = deliver(target_a, signal.SIGUSR1)
    time.sleep(0.3)
    fresh = deliver(target_b, signal.SIGUSR1)  # control: the same call does reach b when it is b
    time.sleep(0.3)
    b.kill()
    out = b.stdout.read().decode()
    print(json.dumps({"a": a.pid, "b": b.pid, "stale": stale.outcome, "fresh": fresh.outcome,
                      "b_got": out.count("got")}))
    """
)


def test_reused_pid_is_not_signalled(tmp_path):
    """A real pid reuse, forced in a new pid namespace through ns_last_pid."""
    need_root("a pid namespace and /proc/sys/kernel/ns_last_pid")
    unshare = need_binary("unshare", "util-linux")
    script = tmp_path / "reuse.py"
    script.write_text(REUSE_SCRIPT)
    res = subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", sys.executable, str(script), str(REPO)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout.strip().splitlines()[-1])
    assert r["a"] == r["b"], f"pid was not reused: {r}"
    assert r["stale"] == DeliveryOutcome.REUSED and r["fresh"] == DeliveryOutcome.SIGNALLED
    assert r["b_got"] == 1  # only the control signal reached the newcomer
