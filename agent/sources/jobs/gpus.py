"""GPU -> job (pure): the job of each GPU's compute processes, as NVML lists them on the GPU and the
jobs source placed them. The one join every consumer makes (``training_node_gpu_job_info``, the
ledger, the alerts), so they cannot disagree about which job a GPU's seconds are."""

from __future__ import annotations

from agent.snapshot import NodeSnapshot
from agent.sources.gpu.part import GpuPart
from agent.sources.jobs.part import JobIdentity, JobPart


def gpu_jobs(gpu: GpuPart | None, jobs: JobPart | None) -> dict[int, JobIdentity]:
    """GPU index -> its job. A GPU whose processes belong to no known job is absent. Where NVML
    lists no process on any GPU (a container hides them) and the node's training processes are all
    of one job, every GPU is that job's, as the ledger counts such a node's GPUs busy together."""
    if gpu is None or jobs is None or not jobs.jobs:
        return {}
    by_id = {j.job_id: j for j in jobs.jobs}
    out: dict[int, JobIdentity] = {}
    listed = False
    for g in gpu.gpus:
        for p in sorted(g.processes, key=lambda p: p.pid):
            listed = True
            job_id = jobs.pids.get(p.pid)
            if job_id is not None and job_id in by_id:
                out[g.index] = by_id[job_id]
                break
    if not listed and len(by_id) == 1:
        only = next(iter(by_id.values()))
        return {g.index: only for g in gpu.gpus}
    return out


def of_snapshot(snap: NodeSnapshot) -> dict[int, JobIdentity]:
    return gpu_jobs(snap.part(GpuPart), snap.part(JobPart))


def jobs_of(snap: NodeSnapshot) -> tuple[JobIdentity, ...]:
    part = snap.part(JobPart)
    return part.jobs if part else ()


def job_of_pid(snap: NodeSnapshot, pid: int) -> str | None:
    """The Slurm job id the jobs source placed this training process in, or None."""
    part = snap.part(JobPart)
    return part.pids.get(pid) if part else None
