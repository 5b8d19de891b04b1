"""The spans of one step report (pure): ``tna_client.spans``'s ``spans`` and ``recent`` keys.

The file is written by the trainer into a world-writable folder: untrusted. A report without spans
(a client older than them) is ``None``, not an error; a report with bad spans is a ``ValueError``
that says what is wrong. ``agent.steps.report`` parses the rest of the same file.
"""

from __future__ import annotations

import json
import math
from typing import Any

from agent.core.rfc3339 import parse_time
from agent.core.vocabulary import TrainerSpan
from agent.sources.trainer.part import Said

MAX_RECENT = 64
LISTED = (TrainerSpan.CHECKPOINT, TrainerSpan.EVALUATION)
TIME_RANGE = (1e9, 1e11)  # unix seconds: 2001 to the 5th millennium


def _int(v: Any, what: str, optional: bool = False) -> int | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 31:
        raise ValueError(f"{what} must be a non-negative integer")
    return v


def _num(v: Any, what: str, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not lo <= v <= hi:
        raise ValueError(f"{what} must be a number in [{lo:g}, {hi:g}]")
    return float(v)


def steps_object(raw: bytes) -> dict[str, Any]:
    """A step report's JSON object (``agent.steps.report`` reads the rest of the same file)."""
    try:
        d = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("not JSON") from None
    if not isinstance(d, dict) or d.get("kind") != "steps":
        raise ValueError('not a {"kind": "steps"} object')
    return d


def parse_said(raw: bytes) -> Said | None:
    d = steps_object(raw)
    spans = d.get("spans")
    if spans is None:
        return None
    if not isinstance(spans, dict):
        raise ValueError("spans must be an object")
    totals: dict[TrainerSpan, tuple[int, float]] = {}
    for kind in TrainerSpan:
        t = spans.get(str(kind), {"count": 0, "seconds": 0})
        if not isinstance(t, dict):
            raise ValueError(f"spans.{kind} must be an object")
        totals[kind] = (
            _int(t.get("count"), f"spans.{kind}.count") or 0,
            _num(t.get("seconds"), f"spans.{kind}.seconds", 0, 1e9),
        )
    recent = d.get("recent", [])
    if not isinstance(recent, list) or len(recent) > MAX_RECENT:
        raise ValueError(f"recent must be a list of at most {MAX_RECENT} spans")
    listed = []
    for x in recent:
        if not isinstance(x, list) or len(x) != 3 or x[0] not in LISTED:
            raise ValueError('each of recent must be ["checkpoint" or "evaluation", start, end or null]')
        start = _num(x[1], "a span's start", *TIME_RANGE)
        end = None if x[2] is None else _num(x[2], "a span's end", start, TIME_RANGE[1])
        listed.append((TrainerSpan(x[0]), start, end))
    pid = _int(d.get("pid"), "pid")
    if not pid:
        raise ValueError("pid must be positive")
    return Said(
        pid=pid,
        rank=_int(d.get("rank"), "rank") or 0,
        local_rank=_int(d.get("local_rank"), "local_rank", optional=True),
        time=parse_time(d.get("time")),
        totals=totals,
        recent=tuple(listed),
    )
