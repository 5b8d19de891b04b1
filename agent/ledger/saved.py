"""Periodic checkpoint reports from the trainer: ``saved-<pid>-<time_ns>.json`` files in the
checkpoint request directory (the one holding ``request.json``), written atomically by
``PreemptionGuard.saved()`` or by any script:

    {"kind": "saved", "step": 1200, "path": "/mnt/ckpt/step-1200", "seconds": 41.5,
     "time": "2025-03-14T06:11:00Z", "pid": 4242}

The files are untrusted input (the directory is world-writable): each one is parsed strictly, a bad
one is renamed ``*.bad`` beside the others with its reason logged, and a good one is deleted once it
is recorded. Files are opened without following symlinks and read up to a size limit.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import structlog

from agent.core.fsread import read_trainer_file
from agent.core.rfc3339 import parse_time
from agent.core.statefile import load_state

log = structlog.get_logger("ledger")

PATTERN = re.compile(r"^saved-\d{1,10}-\d{1,20}\.json$")
MAX_BYTES = 16 * 1024
MAX_SECONDS = 7 * 86400.0
FUTURE_SLACK = 300.0  # a trainer's clock a little ahead of ours is fine; an hour ahead is not


@dataclass(frozen=True, slots=True)
class Saved:
    time: float  # unix seconds when the checkpoint became durable
    seconds: float | None  # how long the save took
    step: int | None
    path: str | None
    pid: int


def parse_saved(raw: bytes, now: float) -> Saved:
    """Strict parse of one report; ``ValueError`` says what is wrong."""
    try:
        d = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("not JSON") from None
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    if d.get("kind") != "saved":
        raise ValueError(f'kind must be "saved", got {str(d.get("kind"))[:40]!r}')
    t = parse_time(d.get("time"))
    if t > now + FUTURE_SLACK:
        raise ValueError(f"time is {t - now:.0f} s in the future")
    seconds = d.get("seconds")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
            raise ValueError("seconds must be a number or null")
        if not 0 <= seconds <= MAX_SECONDS:
            raise ValueError(f"seconds out of range: {seconds}")
        seconds = float(seconds)
    step = d.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise ValueError("step must be a non-negative integer or null")
    path = d.get("path")
    if path is not None and (not isinstance(path, str) or len(path) > 4096):
        raise ValueError("path must be a string (at most 4096 characters) or null")
    pid = d.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise ValueError("pid must be a positive integer")
    return Saved(time=t, seconds=seconds, step=step, path=path, pid=pid)


def _read(path: Path) -> bytes:
    return read_trainer_file(path, MAX_BYTES)


def collect(directory: Path, now: float, kept: set[str]) -> list[Saved]:
    """Every new report in ``directory``, oldest first; each good file is deleted, each bad one set
    aside. ``kept`` holds the names recorded but not deletable: they are not counted twice."""
    try:
        names = sorted(n for n in os.listdir(directory) if PATTERN.match(n) and n not in kept)
    except OSError:
        return []
    out: list[Saved] = []
    for name in names:
        path = directory / name
        report = load_state(
            path,
            lambda raw: parse_saved(raw, now),
            log,
            damaged="unusable checkpoint report set aside",
            read=_read,
            level="error",
            key="file",
        )
        if report is None:  # gone, or set aside
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            kept.add(name)
            log.warning("cannot delete a recorded checkpoint report", file=str(path), error=e.strerror)
        out.append(report)
    out.sort(key=lambda s: s.time)
    return out
