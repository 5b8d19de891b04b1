"""The processes source's snapshot part: the followed training processes.

Counters are cumulative raw values as the kernel or driver reports them, converted to base units
(bytes, seconds); ``None`` always means "not available on this node", never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class ProcessStat:
    """A training process together with its live descendants (data-loader workers)."""

    pid: int
    start_time_ticks: int  # field 22 of /proc/<pid>/stat, identifies the process across pid reuse
    comm: str
    # utime+stime of the process and its live descendants, plus their reaped children's
    # (cutime+cstime), so data-loader workers restarting every epoch don't make it go backwards
    cpu_seconds: float
    read_bytes: int | None  # /proc/<pid>/io read_bytes (block layer and NFS), summed over the tree
    rchar: int | None  # /proc/<pid>/io rchar: covers FUSE (ossfs) and page-cache reads too
    allowed_cores: float  # min(cpuset size, cgroup cpu quota)
    threads: int = 1
    descendants: int = 0
    # where read_bytes and rchar are None because /proc/<pid>/io is unreadable: why, and the read
    # bytes of the trainer's cgroup (every process in it, block devices only) with that cgroup
    io_problem: str | None = None
    cgroup_read_bytes: int | None = None
    cgroup: str | None = None
    # (pid, start time, seconds on a CPU or waiting for one) of each member, the root first: a
    # data-loader worker pegged at one core is visible even where the tree's total is not
    members: tuple[tuple[int, int, float], ...] = ()
    # members in uninterruptible sleep at this read (state "D": inside a disk, NFS or FUSE read, an
    # fsync): a read that outlasts a window completes no bytes in it, but its reader is seen waiting
    blocked: int = 0
    wchar: int | None = None  # /proc/<pid>/io wchar (bytes write() took), summed over the tree
    # /proc/<pid>/io write_bytes (bytes sent to storage: files and block devices, not pipes or sockets)
    write_bytes: int | None = None
    # the job's rank count from the tree's environment (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE): 1
    # where readable and unset (one process, no process group, no collective to wait in); None where
    # no member's environment could be read (another user's process and the agent not root)
    world_size: int | None = None


@dataclass(frozen=True, slots=True)
class ProcessPart:
    source: ClassVar[str] = "processes"  # its source: snap.part(ProcessPart) finds it by this

    processes: tuple[ProcessStat, ...]
    malformed_lines: int = 0  # in this read
    malformed_lines_total: int = 0  # since the agent started
    read_at: float | None = field(default=None, compare=False)  # monotonic time its counters were read
