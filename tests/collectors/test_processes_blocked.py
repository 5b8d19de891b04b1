"""A training process blocked in a read that outlasts the agent's window: the process collector sees
it waiting (state ``D``, uninterruptible sleep) though the read completes no bytes meanwhile, and
counts what the tree writes, so the classifier can tell a checkpoint's fsync from an input stall.

Real processes and a real throttle: a reader asks for 4 MiB in one O_DIRECT read from a file on this
machine's disk (a loop device where the file system has none), inside a cgroup that holds the disk
to 1 MiB/s (the lab's ``TrainerCgroup``: blk-throttle on cgroup v1, ``io.max`` on v2), so the read
takes about 4 s; a sleeper
(``time.sleep``) beside it is in interruptible sleep, not blocked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import need_root

from agent.sources.processes.collector import ProcessCollector
from lab.blockdev import make_data
from lab.cgroups import TrainerCgroup

READER = r"""
import mmap, os, sys
buf = mmap.mmap(-1, 4 << 20)
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)  # never the page cache: the disk, throttled
with open(sys.argv[2], "wb") as log:
    log.write(b"x" * (3 << 20))  # some writes first: counted, and over before the read blocks
print("ready", flush=True)
sys.stdin.readline()  # in the throttled cgroup from here
os.readv(fd, [buf])  # 4 MiB in one read at 1 MiB/s
print("read", flush=True)
sys.stdin.readline()
"""


def test_a_reader_blocked_in_a_long_read_is_seen_blocked(tmp_path: Path) -> None:
    need_root("a cgroup that throttles a disk")
    data = make_data(tmp_path, 8 << 20)
    cgroup = TrainerCgroup(f"tna-blocked-reader-{os.getpid()}", data.device, 1 << 20).create()  # the lab's
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(data.path), str(tmp_path / "log.bin")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdin is not None and reader.stdout is not None
        assert reader.stdout.readline().strip() == "ready"
        cgroup.join(reader.pid)
        collector = ProcessCollector("/proc", "/sys", lambda: [reader.pid, sleeper.pid])
        before = {p.pid: p for p in collector.collect().processes}
        assert before[reader.pid].wchar is not None and before[reader.pid].wchar >= 3 << 20
        reader.stdin.write("go\n")
        reader.stdin.flush()
        seen: list[tuple[int, int]] = []
        end = time.monotonic() + 2.0  # half the read's 4 s: it is in the read all along
        while time.monotonic() < end:
            by_pid = {p.pid: p for p in collector.collect().processes}
            seen.append((by_pid[reader.pid].blocked, by_pid[sleeper.pid].blocked))
            time.sleep(0.2)
        assert reader.poll() is None, "the read finished early: the throttle did not hold it"
        # D at (nearly) every look; a look may catch the moment between two throttled dispatches
        assert sum(r for r, _ in seen) >= 0.8 * len(seen), seen
        assert all(s == 0 for _, s in seen), seen  # asleep in time.sleep: interruptible, not blocked
        assert reader.stdout.readline().strip() == "read"  # the read completes: no longer blocked
        by_pid = {p.pid: p for p in collector.collect().processes}
        assert by_pid[reader.pid].blocked == 0
    finally:
        for p in (reader, sleeper):
            p.kill()
            p.wait()
        cgroup.remove()
        data.close()
