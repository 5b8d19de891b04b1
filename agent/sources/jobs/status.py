"""The jobs source's keys of the status JSON, and its lines in ``training-node-agent status``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.core.projection import Spec, fields
from agent.sources.jobs.part import JobIdentity, JobPart

# job names and users stay off the network, as process names do; ids and the scheduler are enough
TCP_VIEW: dict[str, Spec] = {**fields("scheduler")}


def summary(part: JobPart, _rates: Any) -> dict[str, Any]:
    return {
        "scheduler": part.scheduler,
        "jobs": [
            {**j.as_dict(), "pids": sorted(p for p, job in part.pids.items() if job == j.job_id)}
            for j in part.jobs
        ],
        "jobs_problem": part.problem,
    }


def describe(d: Mapping[str, Any]) -> str:
    """A status entry of ``jobs`` worded as :meth:`JobIdentity.describe` words the record."""
    return JobIdentity(
        job_id=str(d.get("job_id")),
        name=d.get("name"),
        user=d.get("user"),
        array_job_id=d.get("array_job_id"),
        array_task_id=d.get("array_task_id"),
    ).describe()


def lines(summarized: Mapping[str, Any]) -> list[str]:
    jobs = summarized.get("jobs") or []
    problem = summarized.get("jobs_problem")
    if not jobs and not problem:
        return []
    out = ["\n[jobs]"]
    for j in jobs:
        step = f", step {j['step']}" if j.get("step") else ""
        out.append(f"  {describe(j)}{step}: pids {', '.join(map(str, j.get('pids') or []))} ({j['source']})")
    if problem:
        out.append(f"  names unknown: {problem}")
    return out
