"""The ledger under ``state_dir``: written atomically, read strictly; a damaged file is set aside
(``.bad``) with a warning and the ledger starts empty, as the classifier's baselines do.

Restarts count nothing twice: the file holds what was booked up to the last save, and a restarted
agent books only the intervals between its own snapshots (the time it was down is in no bucket;
``observed`` says how much time the buckets cover).
"""

from __future__ import annotations

import json
import math
from collections import deque
from pathlib import Path
from typing import Any

import structlog

from agent.core.statefile import load_json, save_state
from agent.ledger.book import Book, join_text
from agent.ledger.state import KEEP_SAVES, Ledger, Reclaim

log = structlog.get_logger("ledger")

FILE_NAME = "goodput-ledger.json"
VERSION = 1


def _opt_number(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"{key} is not a number: {v!r}")
    return float(v)


def _number(d: dict[str, Any], key: str) -> float:
    v = _opt_number(d, key)
    if v is None or v < 0:
        raise ValueError(f"{key} is not a non-negative number")
    return v


def from_json(data: Any, book: Book) -> Ledger:
    """Strict: anything but the shape :meth:`Ledger.to_json` writes raises ``ValueError``."""
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ValueError(f"not a version-{VERSION} ledger")
    book.load_json(data.get("book"))
    ledger = Ledger(book)
    ledger.gpus = int(_number(data, "gpus"))
    ledger.observed = _number(data, "observed")
    ledger.interruptions = int(_number(data, "interruptions"))
    ledger.job = bool(data.get("job"))
    ledger.startup = bool(data.get("startup"))
    ledger.job_since = _opt_number(data, "job_since")
    ledger.last_durable = _opt_number(data, "last_durable")
    step = data.get("last_step")
    ledger.last_step = step if isinstance(step, int) and not isinstance(step, bool) else None
    saves = data.get("saves", [])
    finals = data.get("finals", [])
    if not isinstance(saves, list) or not isinstance(finals, list):
        raise ValueError("saves and finals are lists")
    ledger.saves = deque(
        (
            (_number({"t": s[0]}, "t"), _opt_number({"s": s[1]}, "s"))
            for s in saves
            if isinstance(s, list) and len(s) == 2
        ),
        maxlen=KEEP_SAVES,
    )
    ledger.finals = deque((_number({"f": f}, "f") for f in finals), maxlen=KEEP_SAVES)
    for r in data.get("reclaims", []):
        if not isinstance(r, dict):
            raise ValueError("a reclaim is not an object")
        ledger.reclaims.append(
            Reclaim(
                event_id=str(r.get("event_id", "")),
                at=_number(r, "at"),
                drill=bool(r.get("drill")),
                outcome=str(r.get("outcome", "")),
                lost_gpu_seconds=_number(r, "lost_gpu_seconds"),
                since_durable=_opt_number(r, "since_durable_seconds"),
                gpus=int(_number(r, "gpus")),
                stuck_gpu_seconds=_number(r, "stuck_gpu_seconds"),
                jobs=_jobs_lost(r.get("jobs", {})),
            )
        )
    opened = data.get("open_requests", {})
    if not isinstance(opened, dict):
        raise ValueError("open_requests is not a table")
    # a request open when the agent stopped stays open: the checkpoint episode resumes after a restart
    ledger.open_requests = {str(k): _number(opened, k) for k in opened}
    unsignalled = data.get("unsignalled", {})
    if not isinstance(unsignalled, dict):
        raise ValueError("unsignalled is not a table")
    ledger.unsignalled = {str(k): _number(unsignalled, k) for k in unsignalled}
    ledger.spot_seen = bool(data.get("spot_seen"))
    ledger.saving = _number(data, "saving") if "saving" in data else 0.0
    names = data.get("job_names", {})
    if not isinstance(names, dict) or not all(isinstance(v, dict) for v in names.values()):
        raise ValueError("job_names is not a table of tables")
    ledger.job_names = {str(k): {str(a): b for a, b in v.items()} for k, v in names.items()}
    # a job seen before the restart is the same job: no startup, no new job_since
    ledger.ticks = 1
    return ledger


def _jobs_lost(d: Any) -> dict[str, float]:
    if not isinstance(d, dict):
        raise ValueError("a reclaim's jobs are not a table")
    return {str(k): _number(d, k) for k in d}


def load(state_dir: Path, book: Book) -> Ledger:
    """The saved ledger, or an empty one on ``book``; a damaged file is read into a book of its own,
    so ``book`` is never left half-loaded."""
    loaded = load_json(
        state_dir / FILE_NAME,
        lambda data: from_json(data, Book(book.resolution, book.settle, book.keep)),
        log,
        what="the goodput ledger",
        instead="starting empty",
    )
    return Ledger(book) if loaded is None else loaded


# the file's text in pieces: the ledger without its book, the book's head, its slots
Pieces = tuple[str, str, list[str]]


def to_text(ledger: Ledger) -> Pieces:
    """What the file will hold, taken on the event loop (the ledger changes there every tick) in
    pieces that :func:`write` puts together elsewhere; settled slots cost nothing here
    (:meth:`Book.slot_texts`)."""
    body = json.dumps({"version": VERSION, **ledger.to_json(book=False)}, separators=(",", ":"))
    head, slots = ledger.book.to_text()
    return body, head, slots


def write(state_dir: Path, pieces: Pieces) -> None:
    body, head, slots = pieces
    text = f'{body[:-1]},"book":{join_text(head, slots)}}}'
    save_state(state_dir / FILE_NAME, text)


def save(state_dir: Path, ledger: Ledger) -> None:
    write(state_dir, to_text(ledger))
