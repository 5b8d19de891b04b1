"""The node's step figures from its ranks' reports (pure).

In a data-parallel job every rank makes the same steps, so the node counts one rank's: its lowest
local rank (a counter that does not hop between ranks), and takes each quantile as the slowest rank's
(the one that sets the node's pace). Per-rank step series would multiply the node's series by its
GPUs for figures that are the same on every rank; the ranks show in ``train_rank_info`` only.

The job label: the job the node knows. Where the jobs source (``agent/sources/jobs``) placed the
trainer's pid in a Slurm job (its cgroup, its environment, or slurmd's ``listpids``), that job:
``runtime/build.py`` hands :func:`node_figures` the mapping as ``job_of``, and it wins over what the
trainer's environment says (``$TNA_JOB``, ``$SLURM_JOB_ID``, torchrun's ``$TORCHELASTIC_RUN_ID``),
so a trainer started outside ``srun`` still has its job. The fleet rules
(configs/prometheus/rules.yml) prefer the target's ``training_job`` label and fall back to this one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.steps.report import QUANTILES, StepReport

JobOf = Callable[[int], str | None]  # a trainer's pid -> its Slurm job id, where the agent knows it


@dataclass(frozen=True, slots=True)
class Rank:
    rank: int
    local_rank: int | None
    world_size: int | None
    pid: int


@dataclass(frozen=True, slots=True)
class NodeSteps:
    job: str  # "" when nobody names it
    count: int
    sum: float
    quantiles: dict[str, float]  # p50, p90, p99 of the last period, the slowest rank's
    ranks: tuple[Rank, ...]
    latest: float  # unix time of the newest report


def _key(r: StepReport) -> tuple[int, int]:
    return (r.local_rank if r.local_rank is not None else r.rank, r.rank)


def node_figures(reports: Mapping[int, StepReport], job_of: JobOf | None = None) -> NodeSteps | None:
    """``None`` when no trainer reports steps."""
    if not reports:
        return None
    ranked = sorted(reports.values(), key=_key)
    first = ranked[0]
    job = ""
    for r in ranked:
        job = (job_of(r.pid) if job_of else None) or r.job or ""
        if job:
            break
    return NodeSteps(
        job=job,
        count=first.count,
        sum=first.sum,
        quantiles={q: max(r.period[q] for r in ranked) for q in QUANTILES},
        ranks=tuple(Rank(r.rank, r.local_rank, r.world_size, r.pid) for r in ranked),
        latest=max(r.time for r in ranked),
    )
