"""Slurm as a scheduler backend, through its own commands (the one :class:`Scontrol`), with pure
parsers of ``scontrol show node -o`` / ``show job -o`` and ``slurmd -C``.

The parsers read one-line output (``-o``): ``Key=Value`` pairs separated by spaces. Two values may
hold spaces themselves: a node's ``Reason`` (always the last key, followed by ``[user@time]``) and a
job's ``JobName``. A value runs up to the next `` Key=`` whose key looks like one of Slurm's
(a capital, then letters, digits, ``:/_``), which real job names almost never contain; the jobs
source reads the same lines with the same :func:`~agent.sources.jobs.parse.pairs`.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from agent.core.vocabulary import SchedulerKind
from agent.scheduler.backend import JobInfo, NodeInfo, SchedulerBackend, SchedulerError, clean_reason
from agent.sources.jobs.parse import pairs
from agent.sources.jobs.scontrol import Scontrol, SlurmError

if TYPE_CHECKING:
    from agent.config import Config

T = TypeVar("T")
_STAMP = re.compile(r"\s*\[[^\]@]*@[^\]]*\]\s*$")  # the " [root@2026-12-02T05:10:19]" Slurm appends


def parse_node(text: str) -> NodeInfo:
    """The first node in ``scontrol show node -o`` output; ValueError when there is none."""
    line = next((ln for ln in text.splitlines() if ln.startswith("NodeName=")), None)
    if line is None:
        raise ValueError("no NodeName= line in scontrol's output")
    head, sep, reason = line.partition(" Reason=")
    f = pairs(head)
    state, *flags = f.get("State", "UNKNOWN").split("+")
    return NodeInfo(
        name=f.get("NodeName", ""),
        state=state.rstrip("*~#!%$@^-").upper(),
        drained="DRAIN" in (x.upper() for x in flags),  # DRAIN beside NOT_RESPONDING, ...
        reason=_STAMP.sub("", reason).strip() if sep else "",
    )


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One line of ``scontrol show job -o``: the neutral :class:`JobInfo` and where it runs."""

    info: JobInfo
    state: str  # JobState: RUNNING, PENDING, ...
    nodes: str  # NodeList, Slurm's compressed form
    batch_host: str


def parse_jobs(text: str) -> list[SlurmJob]:
    """Every job in ``scontrol show job -o`` output (one line each)."""
    jobs: list[SlurmJob] = []
    for line in text.splitlines():
        if not line.startswith("JobId="):
            continue
        f = pairs(line)
        job_id = f.get("JobId", "")
        if f.get("ArrayJobId") and f.get("ArrayTaskId") not in (None, "", "N/A"):
            job_id = f"{f['ArrayJobId']}_{f['ArrayTaskId']}"
        info = JobInfo(
            job_id=job_id,
            name=f.get("JobName", ""),
            user=f.get("UserId", "").split("(")[0],
            requeueable=f.get("Requeue") == "1",
        )
        jobs.append(SlurmJob(info, f.get("JobState", ""), f.get("NodeList", ""), f.get("BatchHost", "")))
    return jobs


def runs_on(job: SlurmJob, node: str) -> bool:
    """The job holds ``node``: its batch host, or named in its node list. A compressed range
    (``cn[1-4]``) that holds the node without naming it is matched by the batch host only."""
    return job.batch_host == node or node in re.split(r"[,\s]", job.nodes)


def parse_slurmd_c(text: str) -> str | None:
    """The NodeName of ``slurmd -C`` (``NodeName=cn-17 CPUs=...``)."""
    for line in text.splitlines():
        if line.startswith("NodeName="):
            return pairs(line).get("NodeName") or None
    return None


def slurmd_runs(procfs: str = "/proc") -> bool:
    """A process named slurmd runs on this node."""
    for p in Path(procfs).iterdir():
        if p.name.isdigit():
            try:
                if (p / "comm").read_text().strip() == "slurmd":
                    return True
            except OSError:
                continue
    return False


async def _slurm(call: Awaitable[T]) -> T:
    """The call's result; a Slurm command's failure as the scheduler's (the loop retries it)."""
    try:
        return await call
    except SlurmError as e:
        raise SchedulerError(str(e)) from None


class SlurmBackend(SchedulerBackend):
    kind = SchedulerKind.SLURM
    words = ("Slurm", "Slurm")
    order = 10

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.scontrol = Scontrol(cfg.scheduler.command_timeout)

    @classmethod
    async def detect(cls, cfg: Config) -> bool:
        """scontrol is on PATH and slurmd runs here."""
        return shutil.which("scontrol") is not None and await asyncio.to_thread(slurmd_runs, cfg.agent.procfs)

    async def own_name(self) -> str:
        """This node's NodeName as its slurmd sees it (``slurmd -C``): never the hostname."""
        slurmd = shutil.which("slurmd") or (
            "/usr/sbin/slurmd" if os.path.exists("/usr/sbin/slurmd") else None
        )
        name = None
        if slurmd is not None:
            try:
                name = parse_slurmd_c(await self.scontrol.run([slurmd, "-C"]))
            except SlurmError:
                pass
        if name is None:
            raise SchedulerError("slurmd -C did not say")
        return name

    async def node(self, name: str) -> NodeInfo:
        text = await _slurm(self.scontrol.run([self.scontrol.scontrol, "show", "node", "-o", name]))
        try:
            return parse_node(text)
        except ValueError as e:
            raise SchedulerError(str(e)) from None

    async def jobs_on(self, node: str) -> list[JobInfo]:
        jobs = parse_jobs(await _slurm(self.scontrol.run([self.scontrol.scontrol, "show", "job", "-o"])))
        return [j.info for j in jobs if j.state == "RUNNING" and runs_on(j, node)]

    async def drain(self, node: str, reason: str) -> None:
        s = self.scontrol
        await _slurm(
            s.run([s.scontrol, "update", f"nodename={node}", "state=drain", f"reason={clean_reason(reason)}"])
        )

    async def resume(self, node: str) -> None:
        await _slurm(
            self.scontrol.run([self.scontrol.scontrol, "update", f"nodename={node}", "state=resume"])
        )

    async def requeue(self, job_ids: list[str]) -> None:
        await _slurm(self.scontrol.run([self.scontrol.scontrol, "requeue", ",".join(job_ids)]))

    async def cancel(self, job_ids: list[str]) -> None:
        await _slurm(self.scontrol.run([self.scontrol.scancel, *job_ids]))
