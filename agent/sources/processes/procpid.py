"""/proc/<pid>/stat, /proc/<pid>/io, /proc/<pid>/schedstat and the ``Cpus_allowed_list`` line of
/proc/<pid>/status."""

from __future__ import annotations

from typing import NamedTuple

from agent.sources.host.parse import Parsed


class PidStat(NamedTuple):
    """The fields of /proc/<pid>/stat this agent reads; times in clock ticks (USER_HZ).

    A named tuple rather than a frozen dataclass: it is built for every process of every training
    tree on every tick, and a tuple is three times cheaper to make."""

    pid: int
    comm: str
    state: str
    ppid: int
    utime: int
    stime: int
    cutime: int  # reaped children's user time (their own cutime included)
    cstime: int
    threads: int
    start_time: int  # field 22, ticks after boot: (pid, start_time) names one process across pid reuse

    @property
    def cpu_ticks(self) -> int:
        """Own CPU time plus that of every reaped descendant, so a worker that exits and is waited
        for moves its time into its parent's instead of vanishing."""
        return self.utime + self.stime + self.cutime + self.cstime


def parse_pid_stat(text: str) -> Parsed[PidStat | None]:
    # comm is in parentheses and may itself hold spaces and ')': the last ')' ends it
    open_, close = text.find("("), text.rfind(")")
    if open_ < 0 or close < open_:
        return Parsed(None, 1 if text.strip() else 0)
    f = text[close + 1 :].split(maxsplit=21)
    if len(f) < 20 or not f[0]:
        return Parsed(None, 1)
    try:
        # pid, comm, fields 3 (state), 4 (ppid), 14-17 (utime, stime, cutime, cstime), 20 (threads)
        # and 22 (start time); positional, as a call with keywords costs twice as much
        st = PidStat(
            int(text[:open_]),
            text[open_ + 1 : close],
            f[0],
            int(f[1]),
            int(f[11]),
            int(f[12]),
            int(f[13]),
            int(f[14]),
            int(f[17]),
            int(f[19]),
        )
    except ValueError:
        return Parsed(None, 1)
    return Parsed(st, 0)


def parse_pid_io(text: str) -> Parsed[dict[str, int]]:
    """``key: value`` lines (rchar, wchar, syscr, syscw, read_bytes, write_bytes, ...)."""
    # a plain loop over the lines: cheaper than split()/zip() tricks for a file this short
    out: dict[str, int] = {}
    bad = 0
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            bad += 1 if line.strip() else 0
            continue
        try:
            out[key.strip()] = int(value)
        except ValueError:
            bad += 1
    return Parsed(out, bad)


# the launchers' words for how many ranks a job has: torchrun/accelerate/DeepSpeed, Open MPI, MPICH/PMI
WORLD_SIZE_KEYS = (b"WORLD_SIZE", b"OMPI_COMM_WORLD_SIZE", b"PMI_SIZE")


def world_size_from_environ(raw: bytes) -> Parsed[int | None]:
    """``/proc/<pid>/environ`` (NUL-separated ``KEY=value``) -> the job's rank count as its launcher
    wrote it, ``None`` where none is set (a plain ``python train.py``: one process, no process group).
    A value that is not a positive integer counts as malformed and as unset."""
    found: dict[bytes, bytes] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in WORLD_SIZE_KEYS and key not in found:
            found[key] = value
    for key in WORLD_SIZE_KEYS:
        if key in found:
            try:
                n = int(found[key])
            except ValueError:
                return Parsed(None, 1)
            return Parsed(n, 0) if n > 0 else Parsed(None, 1)
    return Parsed(None, 0)


def parse_schedstat(text: str) -> Parsed[float | None]:
    """/proc/<pid>/schedstat ``run_ns wait_ns timeslices``: seconds on a CPU plus seconds runnable
    but waiting for one. Their sum grows at ~1 s/s for a process that would use a whole core, even
    while other load on the host takes part of that core from it."""
    f = text.split()
    if len(f) < 2:
        return Parsed(None, 1 if text.strip() else 0)
    try:
        run, wait = int(f[0]), int(f[1])
    except ValueError:
        return Parsed(None, 1)
    if run < 0 or wait < 0:
        return Parsed(None, 1)
    return Parsed((run + wait) / 1e9, 0)


def count_cpu_list(spec: str) -> int | None:
    """``"0-3,8,10-11"`` -> 7; ``None`` if it is not a CPU list."""
    total = 0
    for part in spec.strip().split(","):
        lo, dash, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if dash else a
        except ValueError:
            return None
        if a < 0 or b < a:
            return None
        total += b - a + 1
    return total or None


def parse_cpus_allowed(status_text: str) -> Parsed[int | None]:
    """Number of CPUs in the ``Cpus_allowed_list`` line of /proc/<pid>/status."""
    for line in status_text.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            n = count_cpu_list(line.partition(":")[2])
            return Parsed(n, 0 if n is not None else 1)
    return Parsed(None, 0)
