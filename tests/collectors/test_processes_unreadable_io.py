"""A trainer owned by another user: /proc/<pid>/io is unreadable to the agent (the unit runs it as its
own user with CAP_KILL only). Nothing goes missing silently: the collector says why, once, in the log
and in status, and takes the trainer's read bytes from its cgroup where the kernel keeps them.

Real processes: the trainer runs as root reading a file with O_DIRECT (the lab's data source: a loop
device where the file system has no disk of its own), so every read reaches the block layer, inside
a cgroup this test makes; the collector runs in a subprocess as an unprivileged uid (setpriv), as the
unit's user would.

cgroup v1 counts a disk's reads in ``blkio.throttle.io_service_bytes`` only once blk-throttle is set
up on that disk, and since Linux 6.10 (a3166c51702b, "blk-throttle: delay initialization until
configuration") that happens at the first write of a throttle rule for it, by anyone, and lasts
until the disk goes away. On a box where nothing has throttled the disk since boot, every cgroup's
file says ``Total 0`` whatever is read: the suite failed so on a fresh box when this test ran before
anything else had throttled the disk (the lab and the straggler test do), and passed on any box that
had. So the test's cgroup gets a rule without a limit (``0``) for the data's disk before the trainer
reads: the kernel counts from then on, and nothing is slowed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, need_binary, need_root, wait_until
from other_user import UNPRIVILEGED_UID, need_checkout_readable_by

from agent.sources.processes.cgroup import parse_blkio_bytes, parse_io_stat
from agent.sources.processes.part import ProcessStat
from agent.sources.processes.readcounters import CgroupReads
from agent.sources.processes.status import _read_counters, lines
from lab.blockdev import make_data

AGENT_UID = UNPRIVILEGED_UID  # the unit's user, as far as /proc/<pid>/io is concerned
CGROUP = "tna-reliability-unreadable-io"

TRAINER = r"""
import mmap, os, sys, time
buf = mmap.mmap(-1, 1 << 20)
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)  # never the page cache: every read is counted
print("ready", flush=True)
sys.stdin.readline()  # every read from here is in the test's cgroup
end = time.time() + 90
while time.time() < end:
    os.lseek(fd, 0, 0)
    while os.readv(fd, [buf]) > 0:
        pass
    time.sleep(0.2)  # ~20 MB/s: enough to count, gentle on a shared disk
"""

COLLECT = r"""
import dataclasses, json, sys, time
from agent.sources.processes.collector import ProcessCollector
from agent.sources.processes.status import _read_counters, lines
pid = int(sys.argv[1])
c = ProcessCollector("/proc", "/sys", lambda: [pid])
out = []
for _ in range(3):
    [p] = c.collect().processes
    out.append({**dataclasses.asdict(p), "status": _read_counters(p)})
    time.sleep(1.0)
print("RESULT " + json.dumps(out), flush=True)
"""


def _cgroup_dir() -> tuple[Path, str] | None:
    """A cgroup of our own with read counters: v1 blkio, or v2 with the io controller enabled."""
    v1 = Path("/sys/fs/cgroup/blkio")
    if (v1 / "blkio.throttle.io_service_bytes").exists():
        return v1 / CGROUP, f"blkio:/{CGROUP}"
    v2 = Path("/sys/fs/cgroup")
    if "io" in (v2 / "cgroup.subtree_control").read_text(errors="replace").split():
        return v2 / CGROUP, f"v2:/{CGROUP}"
    return None


@pytest.fixture
def trainer(tmp_path):
    need_root("a trainer owned by root, a collector as another uid, a cgroup of its own")
    data = make_data(tmp_path, 4 << 20)  # on disk (fsync'd), read with O_DIRECT: a disk's reads
    os.chmod(tmp_path, 0o755)
    where = _cgroup_dir()
    proc = subprocess.Popen(
        [sys.executable, "-c", TRAINER, str(data.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        if where is not None:
            where[0].mkdir(exist_ok=True)
            if where[1].startswith("blkio:"):
                # no limit ("0"), but the disk's blk-throttle is set up, so v1 counts its reads (above)
                (where[0] / "blkio.throttle.read_bps_device").write_text(f"{data.device} 0")
            (where[0] / "cgroup.procs").write_text(str(proc.pid))
        proc.stdin.write("go\n")
        proc.stdin.flush()
        if where is not None:
            # the kernel counts a read when it completes: this waits for the trainer's first one
            wait_until(
                lambda: _kernel_reads(where[1]),
                timeout=30,
                what=f"the kernel counting reads of {data.disk_name} ({data.device}) in {where[1]}",
            )
        yield proc.pid, where[1] if where else None
    finally:
        proc.kill()
        proc.wait()
        data.close()
        if where is not None and where[0].exists():
            for _ in range(50):  # the cgroup empties a moment after its last process is reaped
                try:
                    where[0].rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def _collect_as(pid: int, uid: int | None) -> list[dict]:
    cmd = [sys.executable, "-c", COLLECT, str(pid)]
    if uid is not None:
        setpriv = need_binary("setpriv", "util-linux")
        cmd = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    results = json.loads(line.removeprefix("RESULT "))
    said = out.stdout.count("read counters of a training process are unreadable")
    for r in results:
        r["said"] = said
    return results


def test_another_users_trainer_is_said_once_and_read_from_its_cgroup(trainer):
    need_checkout_readable_by(AGENT_UID)  # here, not in the fixture: said once with the others' skips
    pid, cgroup = trainer
    as_root = _collect_as(pid, None)
    assert as_root[-1]["read_bytes"] is not None and as_root[-1]["io_problem"] is None  # the control
    assert as_root[-1]["status"] == "/proc/<pid>/io" and as_root[0]["said"] == 0

    before = _kernel_reads(cgroup)
    seen = _collect_as(pid, AGENT_UID)
    after = _kernel_reads(cgroup)
    first, last = seen[0], seen[-1]
    assert last["cpu_seconds"] > 0, "the CPU series stay: /proc/<pid>/stat is world-readable"
    for r in seen:
        assert r["read_bytes"] is None and r["rchar"] is None
        assert f"/proc/{pid}/io: permission denied" in r["io_problem"]
        assert f"uid 0's, the agent runs as uid {AGENT_UID}" in r["io_problem"]
    assert first["said"] == 1, "said once, not every tick"
    if cgroup is None:
        assert last["cgroup"] is None and last["status"].startswith("none: ")
        return
    assert last["cgroup"] == cgroup and last["status"].startswith(f"cgroup {cgroup} only")
    # what the collector read is the kernel's own counter, read as root around it
    assert before is not None and after is not None
    assert before <= first["cgroup_read_bytes"] <= last["cgroup_read_bytes"] <= after
    if after - before >= 8 << 20:  # the kernel counted the reads: so did the collector
        assert last["cgroup_read_bytes"] > first["cgroup_read_bytes"]


def _kernel_reads(cgroup: str | None) -> int | None:
    """The cgroup's read bytes, as root reads them straight from the kernel's file."""
    if cgroup is None:
        return None
    kind, _, name = cgroup.partition(":")
    if kind == "blkio":
        text = Path(f"/sys/fs/cgroup/blkio{name}/blkio.throttle.io_service_bytes").read_text()
        return parse_blkio_bytes(text).value
    return parse_io_stat(Path(f"/sys/fs/cgroup{name}/io.stat").read_text()).value


def test_cgroup_counters_from_the_nearest_cgroup_that_keeps_them(tmp_path):
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "cgroup").write_text("12:blkio:/job/rank0\n0::/kubepods/pod1/ctr\n")
    (cg / "kubepods" / "pod1" / "ctr").mkdir(parents=True)
    # io enabled for the pod only, not below it: the pod's counter, and said so in the label
    (cg / "kubepods" / "pod1" / "io.stat").write_text("8:0 rbytes=100 wbytes=1\n259:0 rbytes=23 wbytes=0\n")
    reads = CgroupReads(proc, cg)
    assert reads.read(7) == (123, "v2:/kubepods/pod1")
    (cg / "kubepods" / "pod1" / "io.stat").unlink()
    assert reads.read(7) is None, "never the root cgroup (the whole node), never a guess"
    (cg / "blkio" / "job" / "rank0").mkdir(parents=True)
    (cg / "blkio" / "job" / "rank0" / "blkio.throttle.io_service_bytes").write_text(
        "8:0 Read 4096\n8:0 Write 7\n8:16 Read 1\nTotal 4104\n"
    )
    assert reads.read(7) == (4097, "blkio:/job/rank0")
    # v1 listing no disk: since Linux 6.10 that is a disk nothing has throttled, which v1 does not
    # count, whatever is read (the module docstring): unknown, never 0 bytes read
    (cg / "blkio" / "job" / "rank0" / "blkio.throttle.io_service_bytes").write_text("Total 0\n")
    assert reads.read(7) is None
    # while v2 counts every disk: an io.stat listing none is a cgroup that has read nothing yet
    (cg / "kubepods" / "pod1" / "io.stat").write_text("")
    assert reads.read(7) == (0, "v2:/kubepods/pod1")
    stat = ProcessStat(7, 1, "python", 1.0, None, None, 2.0, io_problem="denied", cgroup="v2:/a")
    assert _read_counters(stat) == "cgroup v2:/a only (block devices, the whole cgroup): denied"
    # the text status says it where it happens, and stays quiet where nothing is missing
    fine = {
        "pid": 8,
        "comm": "ok",
        "read_counters": _read_counters(dataclasses.replace(stat, io_problem=None)),
    }
    shown = lines(
        {"training_processes": [fine, {"pid": 7, "comm": "python", "read_counters": _read_counters(stat)}]}
    )
    assert shown[1:] == [
        "  pid 7 (python) read counters: cgroup v2:/a only (block devices, the whole cgroup): denied"
    ]
    assert lines({"training_processes": [fine]}) == []


def test_read_counter_parsers_count_what_they_cannot_read():
    assert parse_io_stat("8:0 rbytes=10 wbytes=2 rios=1\n8:16 rbytes=5\n").value == 15
    p = parse_io_stat("8:0 rbytes=10\ngarbage\n8:1 wbytes=3\n")
    assert (p.value, p.malformed) == (10, 2)
    assert parse_io_stat("").value is None
    p = parse_blkio_bytes("8:0 Read 1\n8:0 Write 2\n8:0 Read x\nTotal 3\n")
    assert (p.value, p.malformed) == (1, 1)
    assert parse_blkio_bytes("Total 0\n").value is None
