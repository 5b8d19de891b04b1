"""The ledger by scheduler job (pure): each job's GPU-seconds, buckets and money over a period, and
the lines ``report --by job`` prints. ``no-job`` holds every GPU-second no job was on, so the jobs'
GPU-seconds and ``no-job``'s add up to the node's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.ledger.assign import BUCKETS, NO_JOB, Bucket
from agent.ledger.summary import cost_summary
from agent.sources.jobs.part import JobIdentity

_PRODUCTIVE = BUCKETS.index(Bucket.PRODUCTIVE)


def by_job(
    jobs: Mapping[str, tuple[list[float], list[float]]],
    names: Mapping[str, Mapping[str, Any]],
    currency: str | None,
) -> list[dict[str, Any]]:
    """One entry per job, the most GPU-seconds first, ``no-job`` last; money only with ``currency``
    (the ledger is priced)."""
    out = []
    for key, (seconds, cost) in jobs.items():
        total = sum(seconds)
        if total <= 0:
            continue
        known = names.get(key, {})
        entry: dict[str, Any] = {
            "job_id": key,
            "name": known.get("name"),
            "user": known.get("user"),
            "array_job_id": known.get("array_job_id"),
            "array_task_id": known.get("array_task_id"),
            "gpu_seconds": round(total, 3),
            "ratio": round(seconds[_PRODUCTIVE] / total, 6),
            "buckets": {str(b): round(s, 3) for b, s in zip(BUCKETS, seconds, strict=True)},
            "cost": None,
            "advice": known.get("advice"),  # what to rent next time, once the job ended (agent.advice)
        }
        if currency is not None:
            entry["cost"] = cost_summary(currency, list(cost))
        out.append(entry)
    out.sort(key=lambda e: (e["job_id"] == NO_JOB, -e["gpu_seconds"], e["job_id"]))
    return out


def name(entry: Mapping[str, Any]) -> str:
    if entry["job_id"] == NO_JOB:
        return "no job"
    return JobIdentity(
        job_id=str(entry["job_id"]),
        name=entry.get("name"),
        user=entry.get("user"),
        array_job_id=entry.get("array_job_id"),
        array_task_id=entry.get("array_task_id"),
    ).describe()


def lines(entries: list[dict[str, Any]]) -> list[str]:
    """``report --by job``: a line per job (GPU-hours, goodput, money), its buckets under it."""
    if not entries:
        return ["by job: nothing booked in this period"]
    out = ["by job:"]
    for e in entries:
        line = f"  {name(e)}: {e['gpu_seconds'] / 3600:.3f} GPU-h, goodput {e['ratio']:.1%}"
        money = e.get("cost")
        if money:
            line += f", {money['total']:.2f} {money['currency']} (wasted {money['wasted']:.2f})"
        out.append(line)
        parts = [
            f"{b} {sec / 3600:.3f}" + (f" ({money['buckets'][b]:.2f})" if money else "")
            for b, sec in e["buckets"].items()
            if sec > 0
        ]
        out.append("    " + ", ".join(parts))
        advice = e.get("advice") or {}
        out.extend(f"    advice: {line}" for line in advice.get("lines", []))
    return out


def loss_lines(lose: Mapping[str, float], names: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """``job 4127 `llama-7b` (alice) would lose 8.0 GPU-h``, one per job with work at stake."""
    out = []
    for key, gpu_seconds in sorted(lose.items(), key=lambda kv: -kv[1]):
        if key == NO_JOB or gpu_seconds <= 0:
            continue
        entry = {"job_id": key, **names.get(key, {})}
        out.append(f"{name(entry)} would lose {gpu_seconds / 3600:.1f} GPU-h")
    return out
