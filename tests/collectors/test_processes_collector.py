"""ProcessCollector on a real process tree (a parent, two children, a grandchild burning CPU and
reading a file), on synthetic /proc trees for pid reuse and cgroup quotas, and on a real cgroup."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import astuple
from pathlib import Path

import psutil
import pytest
from conftest import need_root

from agent.sources.processes import collector as processes
from agent.sources.processes.collector import ProcessCollector
from agent.sources.processes.part import ProcessPart
from agent.sources.processes.rates import process_rates

FILE_BYTES = 3 * 1024 * 1024
BURN = """
import os, subprocess, sys, time
def burn(seconds):
    t = time.process_time()
    while time.process_time() - t < seconds:
        pass
def read(path):
    with open(path, "rb") as f:
        while f.read(1 << 16):
            pass
"""
GRANDCHILD = (
    BURN
    + """
burn(0.1); read(sys.argv[1]); print("ready", flush=True); sys.stdin.read()
"""
)
CHILD = (
    BURN
    + """
kids = []
if sys.argv[2] == "1":
    kids.append(subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[1]],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    kids[0].stdout.readline()
burn(0.15); read(sys.argv[1]); print("ready", flush=True); sys.stdin.read()
"""
)
PARENT = (
    BURN
    + """
kids = [subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1], str(i), sys.argv[3]],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE) for i in range(2)]
for k in kids:
    k.stdout.readline()
burn(0.1); read(sys.argv[1]); print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "reap":
        kids[0].kill(); kids[0].wait(); print("reaped", flush=True)
"""
)


@pytest.fixture
def tree(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(FILE_BYTES))
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(data), CHILD, GRANDCHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    members: list[int] = []
    try:
        assert parent.stdout.readline().strip() == "ready"
        members = [parent.pid] + [c.pid for c in psutil.Process(parent.pid).children(recursive=True)]
        yield parent
    finally:
        for pid in reversed(members):  # only the processes this test started
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        parent.wait(timeout=10)


def _psutil_totals(pid: int) -> tuple[float, int, int]:
    """CPU seconds, rchar and live descendants of the tree, as psutil sees it."""
    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    cpu = sum(sum(p.cpu_times()[:4]) for p in procs)  # user, system, children_user, children_system
    rchar = sum(p.io_counters().read_chars for p in procs)
    return cpu, rchar, len(procs) - 1


def test_tree_cpu_and_reads_sum_over_descendants(tree):
    pids = [tree.pid, 2**22 + 12345]  # the second does not exist: skipped silently
    c = ProcessCollector("/proc", "/sys", lambda: pids)
    part = c.collect()
    (p,) = part.processes
    cpu, rchar, descendants = _psutil_totals(tree.pid)
    assert p.pid == tree.pid and p.comm.startswith("python")
    assert p.descendants == descendants == 3
    assert abs(p.cpu_seconds - cpu) < 0.015
    assert p.cpu_seconds >= 0.1 + 0.15 * 2 + 0.1 - 0.05  # what the four burned, give or take a tick
    assert p.rchar == rchar
    assert p.rchar >= 4 * FILE_BYTES  # each of the four read the whole file
    assert p.read_bytes is not None
    assert p.threads >= 4
    assert p.allowed_cores == min(len(os.sched_getaffinity(tree.pid)), p.allowed_cores)
    assert part.malformed_lines == 0


def test_a_reaped_worker_does_not_make_counters_go_backwards(tree):
    c = ProcessCollector("/proc", "/sys", lambda: [tree.pid])
    (before,) = c.collect().processes
    tree.stdin.write("reap\n")
    tree.stdin.flush()
    assert tree.stdout.readline().strip() == "reaped"
    (after,) = c.collect().processes
    assert after.descendants == before.descendants - 1
    # the worker's CPU moved into its parent's cutime, its reads into the parent's io counters
    assert before.cpu_seconds - 0.011 <= after.cpu_seconds <= before.cpu_seconds + 0.5
    assert after.rchar >= before.rchar
    rates = process_rates(ProcessPart((before,)), ProcessPart((after,)), 1.0)
    assert rates.process_read[tree.pid] >= 0.0 and rates.process_cpu_cores[tree.pid] >= 0.0


def test_a_pegged_worker_shows_as_busy_even_when_it_shares_its_core(tmp_path):
    """Two CPU burners pinned to one core, under a parent that sleeps: each gets half the core, but
    each was running or waiting to run all the time (schedstat), so each reads ~1 busy core."""
    burn = "import os, time\nos.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\nwhile True: pass\n"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time\n"
            f"ps = [subprocess.Popen([sys.executable, '-c', {burn!r}]) for _ in range(2)]\n"
            f"print('ready', flush=True)\ntime.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    kids: list[int] = []
    try:
        assert parent.stdout.readline().strip() == "ready"
        kids = [c.pid for c in psutil.Process(parent.pid).children()]
        c = ProcessCollector("/proc", "/sys", lambda: [parent.pid])
        time.sleep(0.5)  # the burners pin themselves and get going
        t0 = time.monotonic()
        before = c.collect()
        time.sleep(1.0)
        after = c.collect()
        r = process_rates(before, after, time.monotonic() - t0)
        busy = r.process_member_busy[parent.pid]
        cores = r.process_cpu_cores[parent.pid]
        assert len(busy) == 3  # the parent and both burners
        assert sorted(busy)[0] < 0.2  # the sleeping parent
        # each burner had at most ~half the core, yet was busy (running or runnable) all along
        assert all(b > 0.8 for b in sorted(busy)[1:]), busy
        assert cores < 1.0 + 0.3, cores
    finally:
        for pid in kids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        parent.kill()
        parent.wait(timeout=10)


def test_listed_child_inside_another_listed_tree_is_counted_once(tree):
    child = psutil.Process(tree.pid).children()[0].pid
    part = ProcessCollector("/proc", "/sys", lambda: [child, tree.pid]).collect()
    assert [p.pid for p in part.processes] == [tree.pid]


def test_affinity_limits_allowed_cores(tree):
    os.sched_setaffinity(tree.pid, {0})
    (p,) = ProcessCollector("/proc", "/sys", lambda: [tree.pid]).collect().processes
    assert p.allowed_cores == 1.0


def test_no_pids_reads_nothing(tmp_path):
    c = ProcessCollector(str(tmp_path / "nope"), str(tmp_path), lambda: [])
    assert c.collect() == ProcessPart(())


# --- synthetic /proc trees ---------------------------------------------------------------------


def _proc(
    root: Path, pid: int, ppid: int, start: int, utime: int, rchar: int = 0, comm: str = "python"
) -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    tail = f"S {ppid} 1 1 0 -1 0 0 0 0 0 {utime} 0 0 0 20 0 1 0 {start} 0"
    (d / "stat").write_text(f"{pid} ({comm}) {tail}\n")
    (d / "io").write_text(f"rchar: {rchar}\nread_bytes: 0\n")
    (d / "status").write_text("Name:\tpython\nCpus_allowed_list:\t0-7\n")


def test_pid_reuse_yields_no_rate_and_stale_parent_links_are_dropped(tmp_path):
    proc = tmp_path / "proc"
    _proc(proc, 100, 1, start=500, utime=1000, rchar=10)
    _proc(proc, 101, 100, start=510, utime=500, rchar=5)
    c = ProcessCollector(str(proc), str(tmp_path / "sys"), lambda: [100])
    (a,) = c.collect().processes
    assert (a.cpu_seconds, a.rchar, a.descendants) == (15.0, 15, 1)
    # both exit; new processes get the same pids: 100 under init, 101 no longer its child
    _proc(proc, 100, 1, start=900, utime=10, rchar=1)
    _proc(proc, 101, 1, start=905, utime=10, rchar=1)
    (b,) = c.collect().processes
    assert (b.start_time_ticks, b.cpu_seconds, b.descendants) == (900, 0.1, 0)
    rates = process_rates(ProcessPart((a,)), ProcessPart((b,)), 1.0)
    assert not any(astuple(rates))  # no family has a rate for the new process


def test_process_vanishing_mid_read(tmp_path):
    proc = tmp_path / "proc"
    _proc(proc, 200, 1, start=1, utime=100)
    _proc(proc, 201, 200, start=2, utime=100)
    c = ProcessCollector(str(proc), str(tmp_path / "sys"), lambda: [200, 300])
    assert c.collect().processes[0].descendants == 1
    for f in (proc / "201").iterdir():
        f.unlink()  # the worker exited between listing /proc and reading it
    part = c.collect()
    assert [(p.pid, p.descendants, p.cpu_seconds) for p in part.processes] == [(200, 0, 1.0)]
    assert part.malformed_lines == 0


def test_new_worker_is_counted_at_the_next_walk(tmp_path, monkeypatch):
    proc = tmp_path / "proc"
    _proc(proc, 400, 1, start=1, utime=100)
    c = ProcessCollector(str(proc), str(tmp_path / "sys"), lambda: [400])
    assert c.collect().processes[0].descendants == 0
    _proc(proc, 401, 400, start=2, utime=300)  # the data loader starts its workers
    # between two walks of the tree a tick reads only the processes it already knows
    assert c.collect().processes[0].descendants == 0
    monkeypatch.setattr(processes, "TREE_SECONDS", 0.0)
    (p,) = c.collect().processes
    assert (p.descendants, p.cpu_seconds) == (1, 4.0)


def test_garbled_stat_is_counted(tmp_path):
    proc = tmp_path / "proc"
    _proc(proc, 200, 1, start=1, utime=100)
    _proc(proc, 201, 200, start=2, utime=100)
    (proc / "201" / "stat").write_text("201 (x) S garbage")
    part = ProcessCollector(str(proc), str(tmp_path / "sys"), lambda: [200]).collect()
    assert part.processes[0].descendants == 0 and part.malformed_lines >= 1


@pytest.mark.parametrize(
    "cgroup_line,files,expected",
    [
        # v2: the tightest of the cgroup and its ancestors
        ("0::/kubepods/pod/ctr", {"kubepods/cpu.max": "400000 100000",
                                  "kubepods/pod/ctr/cpu.max": "max 100000"}, 4.0),
        ("0::/a/b", {"a/b/cpu.max": "150000 100000"}, 1.5),
        # hybrid layout: the v2 tree under unified/
        ("0::/a", {"unified/a/cpu.max": "250000 100000"}, 2.5),
        # v1 CFS quota, controllers mounted together
        ("4:cpu,cpuacct:/docker/x", {"cpu,cpuacct/docker/x/cpu.cfs_quota_us": "300000",
                                     "cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000"}, 3.0),
        ("4:cpu,cpuacct:/docker/x", {"cpu,cpuacct/docker/x/cpu.cfs_quota_us": "-1",
                                     "cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000"}, 8.0),
        # quota above the affinity list: the list (0-7) wins
        ("0::/big", {"big/cpu.max": "1600000 100000"}, 8.0),
    ],
)  # fmt: skip
def test_cgroup_quota(tmp_path, cgroup_line, files, expected):
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    _proc(proc, 300, 1, start=1, utime=1)
    (proc / "300" / "cgroup").write_text(cgroup_line + "\n")
    for rel, text in files.items():
        (cg / rel).parent.mkdir(parents=True, exist_ok=True)
        (cg / rel).write_text(text + "\n")
    (p,) = ProcessCollector(str(proc), str(tmp_path), lambda: [300], cgroupfs=str(cg)).collect().processes
    assert p.allowed_cores == expected


def test_real_cgroup_cpu_quota(tree):
    need_root("creating a cgroup with a CPU quota")
    name = f"tna-test-{os.getpid()}"
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    base = Path("/sys/fs/cgroup") if v2 else Path("/sys/fs/cgroup/cpu")
    if not v2 and not (base / "cpu.cfs_quota_us").exists():
        pytest.skip("no cgroup v2 and no v1 cpu controller at /sys/fs/cgroup/cpu")
    if v2 and "cpu" not in (base / "cgroup.subtree_control").read_text().split():
        pytest.skip("cgroup v2 root does not delegate the cpu controller")
    cg = base / name
    cg.mkdir()
    try:
        if v2:
            (cg / "cpu.max").write_text("50000 100000")
        else:
            (cg / "cpu.cfs_period_us").write_text("100000")
            (cg / "cpu.cfs_quota_us").write_text("50000")
        (cg / "cgroup.procs").write_text(str(tree.pid))
        (p,) = ProcessCollector("/proc", "/sys", lambda: [tree.pid]).collect().processes
        assert p.allowed_cores == 0.5
    finally:
        (base / "cgroup.procs").write_text(str(tree.pid))
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.05)


def test_storage_writes_are_told_from_pipe_writes(tmp_path: Path) -> None:
    """write_bytes counts what reached a file (a save); wchar counts a pipe to a worker too."""
    code = (
        "import os, sys\n"
        "r, w = os.pipe()\n"
        "os.set_blocking(w, False)\n"
        "print('ready', flush=True); sys.stdin.readline()\n"
        "with open(sys.argv[1], 'wb') as f:\n"
        "    f.write(b'x' * (8 << 20)); f.flush(); os.fsync(f.fileno())\n"
        "os.write(w, b'y' * 60000)\n"
        "print('done', flush=True); sys.stdin.read()\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "ckpt")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        c = ProcessCollector("/proc", "/sys", lambda: [p.pid])
        (before,) = c.collect().processes
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "done"
        (after,) = c.collect().processes
        c.close()
    finally:
        p.communicate("")
    assert before.write_bytes is not None and after.write_bytes is not None
    assert before.wchar is not None and after.wchar is not None
    stored, written = after.write_bytes - before.write_bytes, after.wchar - before.wchar
    assert 8 << 20 <= stored < (8 << 20) + 65536, stored  # the file, not the pipe
    # the pipe is in wchar; write_bytes counts the file's pages, a page or two over its bytes
    assert written - (8 << 20) >= 60000, (written, stored)
