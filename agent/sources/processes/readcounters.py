"""When /proc/<pid>/io cannot be read: why, and the trainer's read bytes from its cgroup instead.

/proc/<pid>/io needs ptrace access: the same user, or CAP_SYS_PTRACE. The unit runs the agent as its
own user with CAP_KILL only, so a trainer owned by root or a job user has no readable io file (the
CPU series, from the world-readable stat file, are there). Its cgroup's read counters need no
privilege: cgroup v2 ``io.stat`` (``rbytes``), v1 ``blkio.throttle.io_service_bytes`` (``Read``).
They count every process in that cgroup, and block devices only (no NFS), so they are a series of
their own, labelled with the cgroup they come from, and never stand in for ``read_bytes``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from agent.core.fsread import read_optional
from agent.sources.host.parse import Parsed
from agent.sources.processes.cgroup import parse_blkio_bytes, parse_io_stat, parse_proc_cgroup

V1_FILES = ("blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_service_bytes")


def unreadable(path: str) -> str | None:
    """Why ``path`` (a /proc/<pid>/io) cannot be read while it exists; None when it is gone (the
    process exited) or reads fine now."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.read(fd, 1)
        finally:
            os.close(fd)
    except (FileNotFoundError, ProcessLookupError):
        return None
    except PermissionError:
        try:
            owner = os.stat(os.path.dirname(path)).st_uid
        except OSError:
            return None
        return (
            f"{path}: permission denied (the process is uid {owner}'s, the agent runs as uid "
            f"{os.geteuid()} without CAP_SYS_PTRACE)"
        )
    except OSError as e:
        return f"{path}: {e.strerror or e}"
    return None


class CgroupReads:
    """The block-device read bytes of a process's cgroup: the deepest cgroup (never the root one,
    which would be the whole node) whose v2 ``io.stat`` or v1 blkio counter file exists."""

    def __init__(self, procfs: Path, cgroup_root: Path) -> None:
        self.proc = procfs
        self.root = cgroup_root
        self.malformed = 0  # lines, since the last take_malformed()

    def take_malformed(self) -> int:
        n, self.malformed = self.malformed, 0
        return n

    def read(self, pid: int) -> tuple[int, str] | None:
        """(bytes read, "v2:/path" or "blkio:/path"), or None where no cgroup counter is readable."""
        text = read_optional(self.proc / str(pid) / "cgroup")
        if text is None:
            return None
        entries = parse_proc_cgroup(text)
        self.malformed += entries.malformed
        # v2 first: on a hybrid host it is the one a container runtime or systemd unit would use
        for e in sorted(entries.value, key=lambda e: e.hierarchy != 0):
            if e.hierarchy == 0:
                found = self._counter(["", "unified"], e.path, ("io.stat",), parse_io_stat, "v2")
            elif "blkio" in e.controllers:
                mounts = [",".join(e.controllers), "blkio"]
                found = self._counter(mounts, e.path, V1_FILES, parse_blkio_bytes, "blkio")
            else:
                continue
            if found is not None:
                return found
        return None

    def _counter(
        self,
        mounts: list[str],
        path: str,
        names: tuple[str, ...],
        parse: Callable[[str], Parsed[int | None]],
        label: str,
    ) -> tuple[int, str] | None:
        parts = [p for p in path.split("/") if p]
        for mount in mounts:
            base = self.root / mount if mount else self.root
            if not base.joinpath(*parts).is_dir():
                continue
            # the io controller may be enabled only higher up: the nearest cgroup that has the file
            for depth in range(len(parts), 0, -1):
                d = base.joinpath(*parts[:depth])
                for name in names:
                    text = read_optional(d / name)
                    if text is not None:
                        p = parse(text)
                        self.malformed += p.malformed
                        if p.value is None and label == "blkio":
                            # v1 lists a disk only once blk-throttle is set up on it, which Linux
                            # 6.10 and later do at the first throttle rule written for it: with no
                            # rule, the file says Total 0 whatever is read. Unknown, not 0
                            return None
                        # v2 io.stat counts every disk: listing none, nothing was read yet
                        return (p.value or 0, f"{label}:/{'/'.join(parts[:depth])}")
            return None
        return None
