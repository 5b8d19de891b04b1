"""The trainers' step reports: ``steps-<pid>.json`` beside the request file, rewritten whole every
``[trainer] step_report`` by ``tna_client`` (``guard.step()``; format in ``tna_client/steps.py``).

Untrusted input (the directory is world-writable): each file is parsed strictly and a bad one is
skipped with its reason (kept for the status, never set aside: the trainer rewrites it). Files are
opened without following symlinks and read up to a size limit. Pure but for :func:`collect`'s reads.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.core.fsread import read_trainer_file
from agent.core.rfc3339 import parse_time
from agent.sources.trainer.parse import steps_object

PATTERN = re.compile(r"^steps-(\d{1,10})\.json$")
MAX_BYTES = 4096
MAX_FILES = 256  # ranks on one node; a flooded folder stays cheap
MAX_JOB = 128
JOB_CHARS = re.compile(r"^[A-Za-z0-9_.:@+-]{1,128}$")  # a label value that never needs quoting
QUANTILES = ("p50", "p90", "p99")


@dataclass(frozen=True, slots=True)
class StepReport:
    pid: int
    rank: int
    local_rank: int | None
    world_size: int | None
    job: str | None  # what the trainer's environment names the job ($TNA_JOB, Slurm, torchrun)
    count: int  # steps since the trainer started
    sum: float  # seconds of those steps
    period: dict[str, float]  # the last period's count, sum, p50, p90, p99, max
    time: float  # unix seconds of the report


def _num(d: dict[str, Any], key: str, lo: float = 0.0, hi: float = 1e12) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not lo <= v <= hi:
        raise ValueError(f"{key} must be a number in [{lo:g}, {hi:g}]")
    return float(v)


def _opt_int(d: dict[str, Any], key: str) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 24:
        raise ValueError(f"{key} must be a non-negative integer or null")
    return v


def parse_steps(raw: bytes) -> StepReport:
    """Strict parse of one report; ``ValueError`` says what is wrong."""
    d = steps_object(raw)
    pid, rank = _opt_int(d, "pid"), _opt_int(d, "rank")
    if not pid or rank is None:
        raise ValueError("pid (positive) and rank are required")
    job = d.get("job")
    if job is not None and (not isinstance(job, str) or not JOB_CHARS.match(job)):
        raise ValueError("job must be 1-128 characters of A-Z a-z 0-9 _ . : @ + -")
    period = d.get("period")
    if not isinstance(period, dict):
        raise ValueError("period must be an object")
    figures = {"count": _num(period, "count"), "sum": _num(period, "sum")}
    for q in (*QUANTILES, "max"):
        figures[q] = _num(period, q, hi=86400.0)
    return StepReport(
        pid=pid,
        rank=rank,
        local_rank=_opt_int(d, "local_rank"),
        world_size=_opt_int(d, "world_size"),
        job=job,
        count=int(_num(d, "count")),
        sum=_num(d, "sum"),
        period=figures,
        time=parse_time(d.get("time")),
    )


def _read(path: Path) -> bytes:
    return read_trainer_file(path, MAX_BYTES)


def collect(directory: Path) -> tuple[dict[int, StepReport], dict[str, str]]:
    """Every report in ``directory`` by the pid in its name, and the unusable files with why."""
    try:
        names = sorted(n for n in os.listdir(directory) if PATTERN.match(n))[:MAX_FILES]
    except OSError:
        return {}, {}
    good: dict[int, StepReport] = {}
    bad: dict[str, str] = {}
    for name in names:
        try:
            report = parse_steps(_read(directory / name))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            bad[name] = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            continue
        m = PATTERN.match(name)
        if m is None or int(m.group(1)) != report.pid:
            bad[name] = "the pid in the name and in the report differ"
            continue
        good[report.pid] = report
    return good, bad
