"""The jobs source's snapshot part, and :class:`JobIdentity`: the one record of "which job" that
every consumer (status, top, /metrics, alerts, the checkpoint report, the ledger, and later the
straggler work's step metrics) reads. Nothing else spells a job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from agent.core.vocabulary import Bucket, SchedulerKind

NO_JOB = str(Bucket.NO_JOB)  # the ledger's key for GPU-seconds of no scheduler job


class JobSource(StrEnum):
    """Where a training process's job was read, in the order they are tried (the status's
    ``source``). The source's own word, as the GPU source's ``ClockReason``."""

    CGROUP = "cgroup"  # /proc/<pid>/cgroup: slurmstepd's job_<id>/step_<id> path
    ENVIRON = "environ"  # /proc/<pid>/environ: SLURM_JOB_ID (readable as root or as its user)
    LISTPIDS = "listpids"  # scontrol listpids: slurmd's own list of its jobs' processes


@dataclass(frozen=True, slots=True)
class JobIdentity:
    """One scheduler job as this node sees it. ``job_id`` is the scheduler's own id (for an array
    task its real id, 4127, with ``array_job_id`` 4120 and ``array_task_id`` 7 beside it); name and
    user are None until ``scontrol show job`` (or, failing it, the job's environment) said them."""

    job_id: str
    scheduler: SchedulerKind = SchedulerKind.SLURM
    name: str | None = None
    user: str | None = None
    array_job_id: str | None = None
    array_task_id: str | None = None
    step: str | None = None  # "0", "batch", "extern", "interactive"; the first process's step
    source: JobSource = JobSource.CGROUP

    @property
    def key(self) -> str:
        """What the ledger books by and the ``job_id`` label says."""
        return self.job_id

    @property
    def array(self) -> str | None:
        """``4120_7``, Slurm's way of writing an array task."""
        if self.array_job_id is None or self.array_task_id is None:
            return None
        return f"{self.array_job_id}_{self.array_task_id}"

    def describe(self) -> str:
        """``job 4127 `llama-7b` (alice)``: how every alert, status line and report names it."""
        out = f"job {self.job_id}"
        if self.array:
            out += f" [{self.array}]"
        if self.name:
            out += f" `{self.name}`"
        if self.user:
            out += f" ({self.user})"
        return out

    def as_dict(self) -> dict[str, str | None]:
        return {
            "scheduler": str(self.scheduler),
            "job_id": self.job_id,
            "name": self.name,
            "user": self.user,
            "array_job_id": self.array_job_id,
            "array_task_id": self.array_task_id,
            "step": self.step,
            "source": str(self.source),
        }


@dataclass(frozen=True, slots=True)
class JobPart:
    source: ClassVar[str] = "jobs"  # its source: snap.part(JobPart) finds it by this

    jobs: tuple[JobIdentity, ...] = ()  # each job once, by job id
    pids: Mapping[int, str] = field(default_factory=dict)  # training process -> its job's id
    scheduler: SchedulerKind | None = None  # None: no scheduler on this node and no process in a job
    problem: str | None = None  # why names or users are missing (scontrol failing), else None
    lookups_failed_total: int = 0
    malformed_lines_total: int = 0  # since the agent started

    def job(self, job_id: str) -> JobIdentity | None:
        return next((j for j in self.jobs if j.job_id == job_id), None)
