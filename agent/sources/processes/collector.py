"""The training processes and their live descendants (data-loader workers), from <procfs>/<pid>.

Which processes to follow comes from the daemon as a callable (GPU compute processes, checkpoint
targets). For each one the collector sums over the process tree:

- CPU: utime+stime, plus cutime+cstime so a worker that exits and is reaped hands its time to its
  parent instead of making the sum drop;
- reads from /proc/<pid>/io: ``read_bytes`` (what reached the block layer or NFS) and ``rchar``
  (every byte returned by read(): page cache, FUSE mounts such as ossfs, pipes). The kernel adds a
  reaped child's counters into its parent's, so these survive worker restarts too.

``allowed_cores`` is the smaller of the CPU affinity list and the cgroup CPU quota (v2 ``cpu.max``
or v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``, the tightest of the cgroup and its ancestors).

The parent links come from every /proc/<pid>/stat. Each pid is read once and remembered with its
start time; the whole table is rebuilt every ``RESCAN_SECONDS`` so that reparented orphans are seen.
A tree is walked again every ``TREE_SECONDS``; in between, each tick reads only the processes found
by the last walk (checking their start times), so a new data-loader worker is counted within 5 s.
A process that exits between two reads is skipped without a word: that is normal, not an error.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import structlog

from agent.core.fsread import read_attr, read_optional
from agent.core.openfiles import OpenFiles
from agent.sources.host.parse import USER_HZ
from agent.sources.processes.cgroup import parse_cfs_quota, parse_cpu_max, parse_proc_cgroup
from agent.sources.processes.part import ProcessPart, ProcessStat
from agent.sources.processes.procpid import (
    PidStat,
    parse_cpus_allowed,
    parse_pid_io,
    parse_pid_stat,
    parse_schedstat,
    world_size_from_environ,
)
from agent.sources.processes.readcounters import CgroupReads, unreadable

log = structlog.get_logger("processes")

RESCAN_SECONDS = 30.0
TREE_SECONDS = 5.0  # how often each tree's shape is walked again: a new worker shows up within this
QUOTA_TTL_SECONDS = 10.0
ENVIRON_BYTES = 256 * 1024  # ARG_MAX's usual share; the launchers' variables come early


class ProcessCollector:
    name = "processes"
    part = "processes"

    def __init__(
        self, procfs: str, sysfs: str, pids: Callable[[], Iterable[int]], cgroupfs: str | None = None
    ) -> None:
        self.proc = Path(procfs)
        self._procdir = str(self.proc)  # paths built per process per tick: skip Path's __str__
        self.cgroup_root = Path(cgroupfs) if cgroupfs else Path(sysfs) / "fs" / "cgroup"
        self.pids = pids
        self.malformed_total = 0
        self._parents: dict[int, tuple[int, int]] = {}  # pid -> (start_time, ppid)
        self._rescan_at = 0.0
        self._quota: dict[tuple[int, int], tuple[float, float]] = {}  # (pid, start) -> (cores, when)
        # root pid -> (its start time, (pid, start time) of each descendant) at the last walk
        self._shape: dict[int, tuple[int, list[tuple[int, int]]]] = {}
        self._shape_at = -TREE_SECONDS
        self._bad = 0
        self._files = OpenFiles()  # the tree members' stat, schedstat and io files
        self._cgroups = CgroupReads(self.proc, self.cgroup_root)
        # (pid, start time) -> why its /proc/<pid>/io cannot be read (not tried again while it lives)
        self._denied: dict[tuple[int, int], str] = {}
        self._said: set[tuple[int, int]] = set()  # trees whose missing read counters were logged
        # (pid, start time) -> its launcher's rank count (0: readable, none set; None: unreadable),
        # read once: a process's environment is fixed at exec
        self._world: dict[tuple[int, int], int | None] = {}
        # one source for every member's busy time: a series must not switch between the two
        self._schedstat = read_optional(self.proc / "self" / "schedstat") is not None

    # --- reading one process -------------------------------------------------------------------

    def _stat(self, pid: int, keep_open: bool = True) -> PidStat | None:
        path = f"{self._procdir}/{pid}/stat"
        text = self._files.read(path) if keep_open else read_attr(path)
        if text is None:
            return None  # gone
        p = parse_pid_stat(text)
        self._bad += p.malformed
        return p.value

    def _busy(self, st: PidStat) -> float | None:
        """Seconds on a CPU or waiting for one (schedstat); CPU time alone where the kernel has no
        schedstat (CONFIG_SCHED_INFO off). None when it cannot be read now (the process left)."""
        if not self._schedstat:
            return (st.utime + st.stime) / USER_HZ
        text = self._files.read(f"{self._procdir}/{st.pid}/schedstat")
        if text is None:
            return None
        p = parse_schedstat(text)
        self._bad += p.malformed
        return p.value

    def _io(self, st: PidStat) -> dict[str, int] | None:
        key = (st.pid, st.start_time)
        if key in self._denied:
            return None
        path = f"{self._procdir}/{st.pid}/io"
        text = self._files.read(path)
        if text is None:
            why = unreadable(path)  # None: the process is gone
            if why is not None:
                self._denied[key] = why
            return None
        p = parse_pid_io(text)
        self._bad += p.malformed
        return p.value

    def _world_size(self, st: PidStat) -> int | None:
        key = (st.pid, st.start_time)
        if key in self._world:
            return self._world[key]
        try:
            with open(f"{self._procdir}/{st.pid}/environ", "rb") as f:
                raw = f.read(ENVIRON_BYTES)
        except OSError:
            n: int | None = None  # gone, or another user's process and the agent not root
        else:
            p = world_size_from_environ(raw)
            self._bad += p.malformed
            n = p.value or 0
        self._world[key] = n
        return n

    def _tree_world_size(self, tree: list[PidStat]) -> int | None:
        """The largest rank count any member was launched with (torchrun's ranks are its children), 1
        where every member is readable and none names one."""
        sizes = [self._world_size(st) for st in tree]
        known = [n for n in sizes if n is not None]
        if not known:
            return None
        return max(max(known), 1)

    # --- the process tree ----------------------------------------------------------------------

    def _children(self) -> dict[int, list[int]]:
        now = time.monotonic()
        if now - self._rescan_at > RESCAN_SECONDS:
            self._parents.clear()
            self._rescan_at = now
        try:
            names = os.listdir(self.proc)
        except OSError:
            names = []
        live = {int(n) for n in names if n.isdigit()}
        for pid in self._parents.keys() - live:
            del self._parents[pid]
        for pid in live - self._parents.keys():
            st = self._stat(pid, keep_open=False)
            if st is not None:
                self._parents[pid] = (st.start_time, st.ppid)
        children: dict[int, list[int]] = {}
        for pid, (_, ppid) in self._parents.items():
            children.setdefault(ppid, []).append(pid)
        return children

    def _tree(self, root: PidStat, children: dict[int, list[int]]) -> list[PidStat]:
        members = [root]
        queue = [root.pid]
        seen = {root.pid}
        while queue:
            parent = queue.pop()
            for pid in children.get(parent, ()):
                if pid in seen:
                    continue
                st = self._stat(pid)
                if st is None or st.ppid != parent:
                    continue  # exited, or the remembered parent is stale (pid reused)
                seen.add(pid)
                members.append(st)
                queue.append(pid)
        return members

    # --- CPU limits ----------------------------------------------------------------------------

    def _allowed_cores(self, st: PidStat) -> float:
        key = (st.pid, st.start_time)
        now = time.monotonic()
        cached = self._quota.get(key)
        if cached is not None and now - cached[1] < QUOTA_TTL_SECONDS:
            return cached[0]
        limits: list[float] = []
        status = read_optional(self.proc / str(st.pid) / "status")
        if status is not None:
            cpus = parse_cpus_allowed(status)
            self._bad += cpus.malformed
            if cpus.value is not None:
                limits.append(float(cpus.value))
        cg = read_optional(self.proc / str(st.pid) / "cgroup")
        if cg is not None:
            entries = parse_proc_cgroup(cg)
            self._bad += entries.malformed
            for e in entries.value:
                if e.hierarchy == 0:
                    limits += self._quotas(["", "unified"], e.path, self._v2_quota)
                elif "cpu" in e.controllers:
                    limits += self._quotas([",".join(e.controllers), "cpu"], e.path, self._v1_quota)
        cores = min(limits) if limits else float(os.cpu_count() or 1)
        self._quota[key] = (cores, now)
        return cores

    def _quotas(self, mounts: list[str], path: str, read: Callable[[Path], float | None]) -> list[float]:
        """The quota of the cgroup at ``path`` and of each ancestor, under the first mount that has it."""
        for mount in mounts:
            base = self.cgroup_root / mount if mount else self.cgroup_root
            if not (base / path.lstrip("/")).is_dir():
                continue
            found = []
            parts = [p for p in path.split("/") if p]
            for depth in range(len(parts), -1, -1):
                q = read(base.joinpath(*parts[:depth]))
                if q is not None:
                    found.append(q)
            return found
        return []

    def _v2_quota(self, d: Path) -> float | None:
        text = read_optional(d / "cpu.max")
        if text is None:
            return None
        p = parse_cpu_max(text)
        self._bad += p.malformed
        return p.value

    def _v1_quota(self, d: Path) -> float | None:
        quota = read_optional(d / "cpu.cfs_quota_us")
        period = read_optional(d / "cpu.cfs_period_us")
        if quota is None or period is None:
            return None
        p = parse_cfs_quota(quota, period)
        self._bad += p.malformed
        return p.value

    # --- the tick ------------------------------------------------------------------------------

    def collect(self) -> ProcessPart:
        self._bad = 0
        roots = sorted({int(p) for p in self.pids()})
        now = time.monotonic()
        children = None
        if now - self._shape_at > TREE_SECONDS:
            self._shape_at = now
            self._shape = {}
            self._files.sweep()
        trees: list[list[PidStat]] = []
        for pid in roots:
            st = self._stat(pid)
            if st is None:
                continue
            known = self._shape.get(pid)
            if known is not None and known[0] == st.start_time:
                # between walks: the same processes, each checked to still be the one we saw
                tree = [st]
                for p, t in known[1]:
                    m = self._stat(p)
                    if m is not None and m.start_time == t:
                        tree.append(m)
            else:
                children = children if children is not None else self._children()
                tree = self._tree(st, children)
                self._shape[pid] = (st.start_time, [(m.pid, m.start_time) for m in tree[1:]])
            trees.append(tree)
        # a listed process inside another listed one's tree is already counted there
        inner = {m.pid for t in trees for m in t[1:]}
        out = [self._summarize(t) for t in trees if t[0].pid not in inner]
        live = {(p.pid, p.start_time_ticks) for p in out}
        for key in self._quota.keys() - live:
            del self._quota[key]
        if len(self._world) > 4 * len(live) + 64:  # workers come and go every epoch: bounded
            keep = {(m.pid, m.start_time) for t in trees for m in t}
            self._world = {k: v for k, v in self._world.items() if k in keep}
        if self._denied:  # the members' set only when there is something to forget
            members = {(m.pid, m.start_time) for t in trees for m in t}
            for key in self._denied.keys() - members:
                del self._denied[key]
        self._said &= live
        self._bad += self._cgroups.take_malformed()
        self.malformed_total += self._bad
        return ProcessPart(
            tuple(out), malformed_lines=self._bad, malformed_lines_total=self.malformed_total, read_at=now
        )

    def _summarize(self, tree: list[PidStat]) -> ProcessStat:
        root = tree[0]
        read_bytes: int | None = None
        rchar: int | None = None
        wchar: int | None = None
        write_bytes: int | None = None
        cpu_ticks = threads = blocked = 0
        members = []
        for st in tree:  # one pass: this runs for every data-loader worker every tick
            cpu_ticks += st.cpu_ticks
            threads += st.threads
            if st.state == "D":
                blocked += 1
            if (busy := self._busy(st)) is not None:
                members.append((st.pid, st.start_time, busy))
            io = self._io(st)
            if io is None:
                continue
            if (v := io.get("read_bytes")) is not None:
                read_bytes = (read_bytes or 0) + v
            if (v := io.get("rchar")) is not None:
                rchar = (rchar or 0) + v
            if (v := io.get("wchar")) is not None:
                wchar = (wchar or 0) + v
            if (v := io.get("write_bytes")) is not None:
                write_bytes = (write_bytes or 0) + v
        denied = self._denied
        problem = (
            next((why for m in tree if (why := denied.get((m.pid, m.start_time)))), None) if denied else None
        )
        cgroup = None
        if problem is not None:
            read_bytes = rchar = wchar = write_bytes = (
                None  # a sum over part of the tree looks like a slowdown
            )
            cgroup = self._cgroups.read(root.pid)
            self._say_once(root, problem, cgroup)
        return ProcessStat(
            pid=root.pid,
            start_time_ticks=root.start_time,
            comm=root.comm,
            cpu_seconds=cpu_ticks / USER_HZ,
            read_bytes=read_bytes,
            rchar=rchar,
            allowed_cores=self._allowed_cores(root),
            threads=threads,
            descendants=len(tree) - 1,
            io_problem=problem,
            cgroup_read_bytes=cgroup[0] if cgroup else None,
            cgroup=cgroup[1] if cgroup else None,
            members=tuple(members),
            blocked=blocked,
            wchar=wchar,
            write_bytes=write_bytes,
            world_size=self._tree_world_size(tree),
        )

    def _say_once(self, root: PidStat, problem: str, cgroup: tuple[int, str] | None) -> None:
        key = (root.pid, root.start_time)
        if key in self._said:
            return
        self._said.add(key)
        log.warning(
            "read counters of a training process are unreadable",
            pid=root.pid,
            comm=root.comm,
            problem=problem,
            instead=f"its cgroup's block reads ({cgroup[1]})"
            if cgroup
            else "nothing: no cgroup io counters (or a v1 blkio one that counts no disk)",
            series="training_node_process_read_bytes_total and _storage_read_bytes_total absent",
        )

    def close(self) -> None:
        self._files.close()
