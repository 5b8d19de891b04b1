"""Slurm through its own commands: a small runner for ``scontrol`` (argv lists, never a shell, a
timeout on every call) and pure parsers of ``scontrol show node -o`` / ``show job -o``.

The parsers read one-line output (``-o``): ``Key=Value`` pairs separated by spaces. Two values may
hold spaces themselves: a node's ``Reason`` (always the last key, followed by ``[user@time]``) and a
job's ``JobName``. A value runs up to the next `` Key=`` whose key looks like one of Slurm's
(a capital, then letters, digits, ``:/_``), which real job names almost never contain; the jobs
source reads the same lines with the same :func:`~agent.sources.jobs.parse.pairs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import unicodedata
from dataclasses import dataclass

from agent.sources.jobs.parse import pairs

REASON_MAX = 120  # Slurm keeps more, but sinfo -R's column and an alert line do not
_STAMP = re.compile(r"\s*\[[^\]@]*@[^\]]*\]\s*$")  # the " [root@2026-12-02T05:10:19]" Slurm appends


def clean_reason(text: str, limit: int = REASON_MAX) -> str:
    """One line, no control characters, at most ``limit`` characters: what goes into a reason."""
    flat = "".join(" " if unicodedata.category(ch).startswith("C") else ch for ch in text)
    flat = " ".join(flat.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    state: str  # the base state, upper case: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: frozenset[str]  # DRAIN, NOT_RESPONDING, ...
    reason: str  # without Slurm's "[user@time]" stamp; "" when none

    @property
    def drained(self) -> bool:
        """Drained or draining: Slurm starts no new job on it."""
        return "DRAIN" in self.flags


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
        flags=frozenset(x.upper() for x in flags),
        reason=_STAMP.sub("", reason).strip() if sep else "",
    )


@dataclass(frozen=True, slots=True)
class JobInfo:
    job_id: str  # "4127", or "4127_3" for an array task
    name: str
    user: str
    state: str  # JobState: RUNNING, PENDING, ...
    requeueable: bool
    nodes: str  # NodeList, Slurm's compressed form
    batch_host: str


def parse_jobs(text: str) -> list[JobInfo]:
    """Every job in ``scontrol show job -o`` output (one line each)."""
    jobs: list[JobInfo] = []
    for line in text.splitlines():
        if not line.startswith("JobId="):
            continue
        f = pairs(line)
        job_id = f.get("JobId", "")
        if f.get("ArrayJobId") and f.get("ArrayTaskId") not in (None, "", "N/A"):
            job_id = f"{f['ArrayJobId']}_{f['ArrayTaskId']}"
        jobs.append(
            JobInfo(
                job_id=job_id,
                name=f.get("JobName", ""),
                user=f.get("UserId", "").split("(")[0],
                state=f.get("JobState", ""),
                requeueable=f.get("Requeue") == "1",
                nodes=f.get("NodeList", ""),
                batch_host=f.get("BatchHost", ""),
            )
        )
    return jobs


def runs_on(job: JobInfo, node: str) -> bool:
    """The job holds ``node``: its batch host, or named in its node list. A compressed range
    (``cn[1-4]``) that holds the node without naming it is matched by the batch host only."""
    return job.batch_host == node or node in re.split(r"[,\s]", job.nodes)


def parse_slurmd_c(text: str) -> str | None:
    """The NodeName of ``slurmd -C`` (``NodeName=cn-17 CPUs=...``)."""
    for line in text.splitlines():
        if line.startswith("NodeName="):
            return pairs(line).get("NodeName") or None
    return None


class SlurmError(Exception):
    """A Slurm command that failed, timed out or could not run: one line that says which."""


class Scontrol:
    """Runs Slurm's commands as argv lists, each bounded by ``timeout``."""

    def __init__(self, timeout: float, scontrol: str = "scontrol", scancel: str = "scancel") -> None:
        self.timeout = timeout
        self.scontrol = scontrol
        self.scancel = scancel

    async def run(self, argv: list[str]) -> str:
        """stdout of ``argv``; SlurmError on a missing binary, a timeout or a non-zero exit."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]} not found") from None
        except OSError as e:
            raise SlurmError(f"cannot run {argv[0]}: {e.strerror or e}") from None
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await proc.communicate()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise SlurmError(f"{' '.join(argv[:3])} took longer than {self.timeout:g}s") from None
        if proc.returncode != 0:
            said = clean_reason(err.decode(errors="replace") or out.decode(errors="replace"), 200)
            raise SlurmError(f"{' '.join(argv[:3])} failed ({proc.returncode}): {said or 'no output'}")
        return out.decode(errors="replace")

    async def node(self, name: str) -> NodeInfo:
        return parse_node(await self.run([self.scontrol, "show", "node", "-o", name]))

    async def jobs_on(self, node: str) -> list[JobInfo]:
        jobs = parse_jobs(await self.run([self.scontrol, "show", "job", "-o"]))
        return [j for j in jobs if j.state == "RUNNING" and runs_on(j, node)]

    async def drain(self, node: str, reason: str) -> None:
        await self.run(
            [self.scontrol, "update", f"nodename={node}", "state=drain", f"reason={clean_reason(reason)}"]
        )

    async def resume(self, node: str) -> None:
        await self.run([self.scontrol, "update", f"nodename={node}", "state=resume"])

    async def requeue(self, job_ids: list[str]) -> None:
        await self.run([self.scontrol, "requeue", ",".join(job_ids)])

    async def cancel(self, job_ids: list[str]) -> None:
        await self.run([self.scancel, *job_ids])


async def slurmd_node_name(timeout: float) -> str | None:
    """This node's NodeName as its slurmd sees it, or None when slurmd cannot say."""
    slurmd = shutil.which("slurmd") or ("/usr/sbin/slurmd" if os.path.exists("/usr/sbin/slurmd") else None)
    if slurmd is None:
        return None
    try:
        return parse_slurmd_c(await Scontrol(timeout).run([slurmd, "-C"]))
    except SlurmError:
        return None
