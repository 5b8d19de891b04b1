"""What the ledger reads of a snapshot: each GPU's reading, the job on each GPU, and what the trainer
said of the interval (its saves and evaluations, ``agent.sources.trainer``)."""

from __future__ import annotations

from agent.ledger.assign import NO_JOB, LedgerReading
from agent.snapshot import NodeSnapshot
from agent.sources.gpu.part import GpuPart, kernel_share
from agent.sources.jobs.gpus import gpu_jobs
from agent.sources.jobs.part import JobIdentity, JobPart
from agent.sources.trainer.rates import TrainerRates


def readings(snap: NodeSnapshot) -> tuple[LedgerReading, ...]:
    gpu = snap.part(GpuPart)
    if gpu is None:
        return ()
    return tuple(
        LedgerReading(
            g.uuid,
            g.up,
            kernel_share(g),
            g.sm_active if g.sm_active is not None else g.tensor_active,
            g.power_watts,
            g.power_limit_watts,
            bool(g.processes),
            g.activity_windows,
        )
        for g in gpu.gpus
    )


def job_keys(snap: NodeSnapshot) -> tuple[tuple[str, ...], tuple[JobIdentity, ...]]:
    """The job key on each GPU, in ``readings`` order (``no-job`` where none), and the jobs."""
    gpu, part = snap.part(GpuPart), snap.part(JobPart)
    if gpu is None or part is None or not part.jobs:
        return (), ()
    on = gpu_jobs(gpu, part)
    return tuple(on[g.index].key if g.index in on else NO_JOB for g in gpu.gpus), part.jobs


def told(snap: NodeSnapshot) -> tuple[float, float]:
    """The shares of the interval the trainer said it spent saving and evaluating (0 without one)."""
    r = snap.rates.of(TrainerRates)
    return r.saving, r.evaluating
