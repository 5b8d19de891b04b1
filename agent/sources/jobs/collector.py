"""Which Slurm job each training process belongs to, in this order:

1. its cgroup (``/proc/<pid>/cgroup``): the kernel's record, which the process cannot change;
2. its environment (``/proc/<pid>/environ``, readable as root or as the job's user): SLURM_JOB_ID,
   for nodes where Slurm tracks processes without cgroups (proctrack/linuxproc);
3. ``scontrol listpids``: slurmd's own list, asked only while a process is still unplaced.

A process's job is read once per process (pid and start time) and kept while it lives; only an
unplaced one is tried again. Names and users come from ``scontrol show job``, through the worker
thread in ``scontrol.py``: ``collect()`` never waits for scontrol, so until it has answered (or
while it fails) a job is shown by its id, with the environment's name and user where it had them.
"""

from __future__ import annotations

import pwd
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from agent.core.fsread import read_attr, read_optional
from agent.core.vocabulary import SchedulerKind
from agent.sources.jobs.parse import ProcJob, job_from_environ, job_from_proc_cgroup
from agent.sources.jobs.part import JobIdentity, JobPart, JobSource
from agent.sources.jobs.scontrol import JobLookup
from agent.sources.processes.procpid import parse_pid_stat

ENVIRON_BYTES = 256 * 1024  # ARG_MAX's usual share; a longer environment is cut, SLURM_* come early
RETRY_SECONDS = 10.0  # an unplaced process is looked at again this often (a job may start around it)


class JobCollector:
    name = "jobs"
    part = "jobs"

    def __init__(
        self,
        procfs: str,
        pids: Callable[[], Iterable[int]],
        scontrol: JobLookup,
    ) -> None:
        self.proc = Path(procfs)
        self.pids = pids
        self.scontrol = scontrol
        # (pid, start time) -> (its job or None, how it was found, when it was looked at)
        self._seen: dict[tuple[int, int], tuple[ProcJob | None, JobSource | None, float]] = {}
        self._installed = shutil.which(scontrol.slurm.scontrol) is not None
        self.malformed_total = 0

    def _start(self, pid: int) -> int | None:
        text = read_attr(f"{self.proc}/{pid}/stat")
        if text is None:
            return None
        st = parse_pid_stat(text).value
        return st.start_time if st else None

    def _own(self, pid: int) -> tuple[ProcJob | None, JobSource | None, int]:
        """What the process itself says: its cgroup, else its environment."""
        bad = 0
        text = read_optional(self.proc / str(pid) / "cgroup")
        if text is not None:
            p = job_from_proc_cgroup(text)
            bad += p.malformed
            if p.value is not None:
                return p.value, JobSource.CGROUP, bad
        try:
            with open(self.proc / str(pid) / "environ", "rb") as f:
                raw = f.read(ENVIRON_BYTES)
        except OSError:  # another user's process without root, or gone
            return None, None, bad
        e = job_from_environ(raw)
        bad += e.malformed
        return e.value, (JobSource.ENVIRON if e.value else None), bad

    def collect(self) -> JobPart:
        now = time.monotonic()
        bad = 0
        placed: dict[int, tuple[ProcJob, JobSource]] = {}
        unplaced: list[int] = []
        live: set[tuple[int, int]] = set()
        listed = self.scontrol.listpids()
        for pid in sorted({int(p) for p in self.pids()}):
            start = self._start(pid)
            if start is None:
                continue  # gone between the list and this read: normal
            key = (pid, start)
            live.add(key)
            seen = self._seen.get(key)
            if seen is None or (seen[0] is None and now - seen[2] > RETRY_SECONDS):
                job, source, b = self._own(pid)
                bad += b
                seen = (job, source, now)
                self._seen[key] = seen
            if seen[0] is not None and seen[1] is not None:
                placed[pid] = (seen[0], seen[1])
            elif pid in listed:
                placed[pid] = (listed[pid], JobSource.LISTPIDS)
            else:
                unplaced.append(pid)
        for key in self._seen.keys() - live:
            del self._seen[key]
        ids = {j.job_id for j, _ in placed.values()}
        self.scontrol.want(ids, pids=bool(unplaced) and self._installed)
        bad += self.scontrol.malformed
        self.scontrol.malformed = 0
        self.malformed_total += bad
        jobs: dict[str, JobIdentity] = {}
        for _pid, (pj, source) in sorted(placed.items()):
            if pj.job_id not in jobs:
                jobs[pj.job_id] = self._identity(pj, source)
        sched = SchedulerKind.SLURM if (jobs or self._installed) else None
        return JobPart(
            jobs=tuple(jobs.values()),
            pids={pid: pj.job_id for pid, (pj, _) in placed.items()},
            scheduler=sched,
            problem=self.scontrol.problem if sched else None,
            lookups_failed_total=self.scontrol.failed_total,
            malformed_lines_total=self.malformed_total,
        )

    def _identity(self, pj: ProcJob, source: JobSource) -> JobIdentity:
        shown = self.scontrol.shown(pj.job_id)
        return JobIdentity(
            job_id=pj.job_id,
            scheduler=SchedulerKind.SLURM,
            name=shown.name if shown and shown.name else pj.name,
            user=shown.user if shown and shown.user else pj.user or _user(pj.uid),
            array_job_id=(shown.array_job_id if shown else None) or pj.array_job_id,
            array_task_id=(shown.array_task_id if shown else None) or pj.array_task_id,
            step=pj.step,
            source=source,
        )

    def close(self) -> None:
        self.scontrol.close()


def _user(uid: int | None) -> str | None:
    """The name of a uid the cgroup path gave (v1's uid_1000), where scontrol has not said it."""
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
