"""Finding the training processes: ``[trainer] discover`` methods, combined.

A target is remembered as (pid, start time): the start time in ``/proc/<pid>/stat`` never changes for a
process and differs for any later process that gets the same pid, so the signaller can re-check it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from agent.core.fsread import read_optional
from agent.core.vocabulary import DiscoverKind
from agent.sources.processes.cgroup import parse_proc_cgroup
from agent.sources.processes.procpid import PidStat, parse_pid_stat

MAX_CGROUP_DIRS = 4096  # a job's cgroup subtree; bounded so a runaway hierarchy cannot stall discovery


@dataclass(frozen=True, slots=True)
class Target:
    pid: int
    start_time_ticks: int
    comm: str
    source: str  # the discover spec(s) that found it, "+"-joined

    def describe(self) -> str:
        return f"pid {self.pid} ({self.comm})"


@dataclass(frozen=True, slots=True)
class Discovered:
    targets: tuple[Target, ...]
    problems: tuple[str, ...] = ()  # "pidfile /run/x.pid: not found", one line each


def read_pid_stat(procfs: str, pid: int) -> PidStat | None:
    """The process's identity, or None when it is gone (or its stat is unreadable)."""
    text = read_optional(f"{procfs}/{pid}/stat", 4096)
    return None if text is None else parse_pid_stat(text).value


def age_seconds(procfs: str, target: Target) -> float | None:
    """How long ago the target started (from its start time and the system's uptime)."""
    text = read_optional(f"{procfs}/uptime", 256)
    try:
        uptime = float((text or "").split()[0])
    except (IndexError, ValueError):
        return None
    return uptime - target.start_time_ticks / os.sysconf("SC_CLK_TCK")


def list_pids(procfs: str) -> list[int]:
    try:
        return [int(n) for n in os.listdir(procfs) if n.isdigit()]
    except OSError:
        return []


def read_cmdline(procfs: str, pid: int) -> str:
    raw = read_optional(f"{procfs}/{pid}/cmdline", 64 * 1024)
    return (raw or "").replace("\0", " ").strip()


@dataclass
class Discovery:
    """Runs the configured discovery methods against ``procfs``/``sysfs``; blocking (run it in a thread)."""

    specs: list[str]
    procfs: str = "/proc"
    sysfs: str = "/sys"
    gpu_pids: Callable[[], Iterable[int]] = lambda: ()
    exclude: frozenset[int] = field(default_factory=lambda: frozenset({os.getpid()}))

    def discover(self) -> Discovered:
        found: dict[int, list[str]] = {}
        problems: list[str] = []
        for spec in self.specs:
            kind, _, arg = spec.partition(":")
            try:
                pids = self._pids(kind, arg)
            except _Problem as p:
                problems.append(f"{spec}: {p}")
                continue
            for pid in pids:
                sources = found.setdefault(pid, [])
                if kind not in sources:
                    sources.append(kind)
        targets: list[Target] = []
        for pid in sorted(found):
            if pid in self.exclude:
                continue
            st = read_pid_stat(self.procfs, pid)
            if st is None or st.state in ("Z", "X"):
                continue  # gone, or a zombie that can no longer checkpoint anything
            targets.append(Target(pid, st.start_time, st.comm, "+".join(found[pid])))
        return Discovered(tuple(targets), tuple(problems))

    # --- one method each ---------------------------------------------------------------------------

    def _pids(self, kind: str, arg: str) -> list[int]:
        if kind == DiscoverKind.NVML:
            return sorted(set(self.gpu_pids()))
        if kind == DiscoverKind.PIDFILE:
            return [self._pidfile(arg)]
        if kind == DiscoverKind.CMDLINE:
            rx = re.compile(arg)
            return [p for p in list_pids(self.procfs) if rx.search(read_cmdline(self.procfs, p))]
        if kind == DiscoverKind.CGROUP:
            return self._cgroup(arg)
        if kind == DiscoverKind.SYSTEMD_UNIT:
            return self._unit(arg)
        raise _Problem(f"unknown discovery method {kind!r}")

    def _pidfile(self, path: str) -> int:
        text = read_optional(path, 256)
        if text is None:
            raise _Problem("not found or unreadable")
        tok = text.strip().split()[:1]
        if not tok or not tok[0].isdigit() or int(tok[0]) <= 0:
            raise _Problem(f"does not hold a pid ({text.strip()[:40]!r})")
        return int(tok[0])

    def _cgroup_dirs(self, path: str) -> list[Path]:
        """A cgroup directory given directly, or a path inside the hierarchy looked up under every
        mounted hierarchy (v2 root, v1 ``unified``, ``systemd`` and each controller)."""
        direct = Path(path)
        if (direct / "cgroup.procs").is_file():
            return [direct]
        root = Path(self.sysfs) / "fs" / "cgroup"
        rel = path.strip("/")
        candidates = [root / rel]
        try:
            candidates += [d / rel for d in sorted(root.iterdir()) if d.is_dir()]
        except OSError:
            pass
        return [c for c in candidates if (c / "cgroup.procs").is_file()]

    def _cgroup(self, path: str) -> list[int]:
        dirs = self._cgroup_dirs(path)
        if not dirs:
            raise _Problem("no such cgroup")
        pids: set[int] = set()
        seen = 0
        for top in dirs:
            # child cgroups belong to the job too (a launcher may put each rank in its own)
            for dirpath, _dirs, files in os.walk(top):
                seen += 1
                if seen > MAX_CGROUP_DIRS:
                    raise _Problem(f"more than {MAX_CGROUP_DIRS} cgroups below it")
                if "cgroup.procs" in files:
                    text = read_optional(f"{dirpath}/cgroup.procs") or ""
                    pids.update(int(tok) for tok in text.split() if tok.isdigit())
        return sorted(pids)

    def _unit(self, name: str) -> list[int]:
        """The unit's processes: those whose cgroup path (any hierarchy) has the unit as a component.
        Read from /proc, so it needs neither D-Bus nor a running systemd."""
        unit = name if "." in name else f"{name}.service"
        out = []
        for pid in list_pids(self.procfs):
            text = read_optional(f"{self.procfs}/{pid}/cgroup", 64 * 1024)
            if text and any(unit in e.path.split("/") for e in parse_proc_cgroup(text).value):
                out.append(pid)
        return out


class _Problem(Exception):
    """A discovery method that found nothing for a reason worth showing (missing pid file, cgroup)."""
