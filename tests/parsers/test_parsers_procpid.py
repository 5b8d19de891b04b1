"""/proc/<pid>/stat, io, status and cgroup files, and cgroup CPU quota files."""

from __future__ import annotations

import os

from agent.sources.processes.cgroup import parse_cfs_quota, parse_cpu_max, parse_proc_cgroup
from agent.sources.processes.procpid import (
    count_cpu_list,
    parse_cpus_allowed,
    parse_pid_io,
    parse_pid_stat,
    parse_schedstat,
)

STAT_TAIL = "S 5392 7446 5392 34835 7446 4218880 32533 309516 26 82 1677 44 158 99 20 0 12 0 82375 56274944"


def test_stat_fixture(kernel_fixtures):
    text = (kernel_fixtures / "procfs" / "proc" / "26231" / "stat").read_text()
    st = parse_pid_stat(text).value
    assert st is not None
    assert (st.pid, st.comm, st.state, st.ppid) == (26231, "vim", "R", 5392)
    assert (st.utime, st.stime, st.cutime, st.cstime) == (1677, 44, 158, 99)
    assert st.threads == 1 and st.start_time == 82375
    assert st.cpu_ticks == 1677 + 44 + 158 + 99


def test_stat_comm_with_spaces_and_parentheses():
    for comm in ("python3", "pt_data_worker (1)", "a) b (c", ") )", ""):
        st = parse_pid_stat(f"4242 ({comm}) {STAT_TAIL}\n").value
        assert st is not None, comm
        assert st.comm == comm and st.pid == 4242 and st.ppid == 5392 and st.threads == 12


def test_stat_malformed():
    for bad in (
        "4242 (x) S 1 2",
        "x (y) " + STAT_TAIL,
        "4242 (x " + STAT_TAIL,
        "4242 (x) S a" + STAT_TAIL[3:],
    ):
        p = parse_pid_stat(bad)
        assert p.value is None and p.malformed == 1, bad
    assert parse_pid_stat("").malformed == 0


def test_stat_of_this_process():
    with open("/proc/self/stat") as f:
        st = parse_pid_stat(f.read()).value
    assert st is not None and st.pid == os.getpid() and st.ppid == os.getppid()
    assert st.threads >= 1


def test_io():
    text = "rchar: 6976\nwchar: 0\nsyscr: 10\nsyscw: 0\nread_bytes: 4096\nwrite_bytes: 0\n"
    p = parse_pid_io(text)
    assert p.malformed == 0 and p.value["rchar"] == 6976 and p.value["read_bytes"] == 4096
    p = parse_pid_io("rchar: x\nnonsense\nread_bytes: 5\n")
    assert p.malformed == 2 and p.value == {"read_bytes": 5}
    with open("/proc/self/io") as f:
        assert "rchar" in parse_pid_io(f.read()).value


def test_cpus_allowed(kernel_fixtures):
    status = (kernel_fixtures / "procfs" / "proc" / "26231" / "status").read_text()
    assert parse_cpus_allowed(status).value == 8  # "0-7"
    assert count_cpu_list("0-3,8,10-11\n") == 7
    assert count_cpu_list("5") == 1
    for bad in ("", "a-b", "3-1", "-1"):
        assert count_cpu_list(bad) is None
    p = parse_cpus_allowed("Name: x\nCpus_allowed_list:\tzz\n")
    assert p.value is None and p.malformed == 1
    assert parse_cpus_allowed("Name: x\n").malformed == 0


def test_proc_cgroup_v1_and_v2():
    text = "12:cpu,cpuacct:/kubepods/pod1/abc\n1:name=systemd:/x\n0::/kubepods.slice/a.scope\nbroken\n"
    p = parse_proc_cgroup(text)
    assert p.malformed == 1
    v1, named, v2 = p.value
    assert (v1.hierarchy, v1.controllers, v1.path) == (12, ("cpu", "cpuacct"), "/kubepods/pod1/abc")
    assert named.controllers == ("name=systemd",)
    assert (v2.hierarchy, v2.controllers, v2.path) == (0, (), "/kubepods.slice/a.scope")


def test_quotas():
    assert parse_cpu_max("200000 100000\n").value == 2.0
    assert parse_cpu_max("150000 100000").value == 1.5
    p = parse_cpu_max("max 100000\n")
    assert p.value is None and p.malformed == 0
    assert parse_cpu_max("garbage").malformed == 1
    assert parse_cfs_quota("400000\n", "100000\n").value == 4.0
    p = parse_cfs_quota("-1\n", "100000\n")
    assert p.value is None and p.malformed == 0
    assert parse_cfs_quota("x", "100000").malformed == 1


def test_schedstat():
    assert parse_schedstat("1500000000 500000000 42\n").value == 2.0
    assert parse_schedstat("").malformed == 0 and parse_schedstat("").value is None
    for bad in ("12", "x 1 2", "-5 1 2"):
        p = parse_schedstat(bad)
        assert p.value is None and p.malformed == 1
    with open("/proc/self/schedstat") as f:
        assert parse_schedstat(f.read()).value > 0
