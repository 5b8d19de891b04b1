"""``training_node_job_info`` and ``training_node_gpu_job_info``: one series per job and one per
busy GPU to join on. No other family carries a job label: a job id on every GPU series multiplies
the series count with every job (soperator dropped its ``hpc_job`` label for it)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from agent.snapshot import NodeSnapshot
from agent.sources.jobs.gpus import of_snapshot
from agent.sources.jobs.part import JobPart


def render(snap: NodeSnapshot) -> Iterable[Metric]:
    part = snap.part(JobPart)
    if part is None:
        return
    info = GaugeMetricFamily(
        "training_node_job_info",
        "A scheduler job with a training process on this node; always 1 (join on job_id).",
        labels=["scheduler", "job_id", "job_name", "user"],
    )
    for j in part.jobs:
        info.add_metric([str(j.scheduler), j.job_id, j.name or "", j.user or ""], 1.0)
    gpus = GaugeMetricFamily(
        "training_node_gpu_job_info",
        "The job whose process runs on the GPU; always 1 (join on gpu, then job_id).",
        labels=["gpu", "job_id"],
    )
    for index, job in sorted(of_snapshot(snap).items()):
        gpus.add_metric([str(index), job.job_id], 1.0)
    yield info
    yield gpus
