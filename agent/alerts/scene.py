"""What an alert is said against besides its event: the node, its GPUs, the time zone and the time;
and how GPU sets and times are worded in every message."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, tzinfo

from agent.alerts.i18n import t
from agent.alerts.message import NodeIdentity
from agent.snapshot import NodeSnapshot
from agent.sources.gpu.part import GpuPart
from agent.sources.jobs.part import JobIdentity, JobPart


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    model: str
    uuid: str = ""


@dataclass(frozen=True, slots=True)
class Scene:
    """What the renderer knows besides the event."""

    node: NodeIdentity
    gpus: tuple[GpuInfo, ...]
    tz: tzinfo
    now: datetime
    pid: int | None = None  # the agent's own process, named in its start/stop alerts
    # the scheduler jobs on the node, each with the GPU-seconds a reclaim now would lose (None: unknown)
    jobs: tuple[tuple[JobIdentity, float | None], ...] = ()


def gpu_inventory(snap: NodeSnapshot) -> tuple[GpuInfo, ...]:
    gpu = snap.part(GpuPart)
    if gpu is None:
        return ()
    return tuple(GpuInfo(g.index, g.model, g.uuid) for g in gpu.gpus)


def job_inventory(
    snap: NodeSnapshot, losses: dict[str, float] | None
) -> tuple[tuple[JobIdentity, float | None], ...]:
    part = snap.part(JobPart)
    if part is None:
        return ()
    return tuple((j, losses.get(j.key) if losses is not None else None) for j in part.jobs)


def job_lines(jobs: tuple[tuple[JobIdentity, float | None], ...], lang: str) -> list[str]:
    """``job 4127 `llama-7b` (alice) will lose 8.0 GPU-h``, one per job on the node."""
    out = []
    for job, lose in jobs:
        line = job.describe()
        if lose:
            line += " " + t("job_lose", lang, hours=f"{lose / 3600:.1f}")
        out.append(line)
    return out


def when(dt: datetime, tz: tzinfo) -> str:
    local = dt.astimezone(tz)
    return local.strftime("%Y-%m-%d %H:%M:%S ") + (local.tzname() or "UTC")


def ranges(indices: list[int]) -> str:
    """[0,1,2,3,5] -> ``0-3,5``"""
    out: list[str] = []
    idx = sorted(set(indices))
    i = 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        out.append(str(idx[i]) if i == j else f"{idx[i]}-{idx[j]}")
        i = j + 1
    return ",".join(out)


def describe_gpus(gpus: tuple[GpuInfo, ...], wanted: tuple[int, ...], lang: str) -> str:
    """``8 × NVIDIA A100-SXM4-80GB (0-7)``; ``wanted`` empty means all of them."""
    chosen = [g for g in gpus if not wanted or g.index in wanted]
    if not chosen:
        return f"GPU {ranges(list(wanted))}" if wanted else t("no_gpus", lang)
    by_model: dict[str, list[int]] = {}
    for g in chosen:
        by_model.setdefault(g.model, []).append(g.index)
    missing = sorted(set(wanted) - {g.index for g in chosen})
    parts = [f"{len(ix)} × {model} ({ranges(ix)})" for model, ix in by_model.items()]
    if missing:
        parts.append(f"GPU {ranges(missing)}")
    return "; ".join(parts)
