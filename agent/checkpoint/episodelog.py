"""What the checkpoint action did for each notice, kept under ``state_dir`` so that every notice is
acted on exactly once, across agent restarts and reloads too.

The record is written *before* a signal is sent (phase ``acting``): an agent that dies right then
does not signal again after its restart (it rewrites the request file instead, which trainers
de-duplicate by event id). A double signal would cost the trainer a second checkpoint inside the
notice window; a lost one is covered by the request file.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import structlog

from agent.core.statefile import write_atomic
from agent.core.vocabulary import OPEN_STATES, EpisodeState

log = structlog.get_logger("checkpoint")

KEEP_SECONDS = 7 * 86400  # finished records are kept this long (drill history, status)


@dataclass
class Episode:
    """One notice, from receipt to ack (or miss, or withdrawal). Times are unix seconds."""

    event_id: str
    provider: str
    kind: str
    deadline: float
    received_at: float
    act_at: float
    escalate_at: float | None = None
    drill: bool = False
    dry_run: bool = False
    phase: EpisodeState = EpisodeState.SCHEDULED
    requested_at: float | None = None
    finished_at: float | None = None
    ack: dict[str, Any] | None = None  # step, path, via, rank, pid
    escalated: bool = False
    deliveries: list[dict[str, Any]] = field(default_factory=list)  # pid, comm, source, outcome, ...
    channels: dict[str, str] = field(default_factory=dict)  # "file" -> path, "http" -> "200" | error
    problems: list[str] = field(default_factory=list)
    late_ack: bool = False
    # the scheduler jobs on the node when the notice came (JobIdentity.as_dict() and their pids)
    jobs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def open(self) -> bool:
        return self.phase in OPEN_STATES

    @property
    def duration(self) -> float | None:
        """Request to ack: the trainer's checkpoint time as the agent saw it."""
        if self.ack is None or self.requested_at is None:
            return None
        return max(0.0, float(self.ack["at"]) - self.requested_at)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Episode:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


class EpisodeLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.episodes: dict[str, Episode] = {}
        self.loaded = False
        # a reload can stop the part while its load runs in a worker thread; the stop's save (in
        # another thread) then waits for the load, or it would write the still empty log over
        # the file and the next part would signal handled notices again
        self._lock = threading.Lock()

    def load(self) -> None:
        """Read the episode log; an unreadable one is moved aside (kept for a post-mortem), never fatal."""
        with self._lock:
            self._load()
            self.loaded = True

    def _load(self) -> None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as e:
            log.error("cannot read the checkpoint ledger; starting empty", path=str(self.path), error=str(e))
            return
        try:
            data = json.loads(raw)
            episodes = {k: Episode.from_dict(v) for k, v in data["episodes"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            log.error(
                "checkpoint ledger is corrupt; moved aside, starting empty",
                path=str(self.path),
                moved_to=str(aside),
                error=f"{type(e).__name__}: {e}",
            )
            return
        self.episodes = episodes

    def save(self) -> None:
        # A component stopped before its log was read (a reload right after a start) must not
        # write its empty one over the file: the next one would then signal handled notices again.
        with self._lock:
            if not self.loaded:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            data = {"version": 1, "episodes": {k: asdict(v) for k, v in self.episodes.items()}}
            write_atomic(self.path, json.dumps(data, indent=1).encode(), 0o600)

    def prune(self, now: float) -> None:
        with self._lock:
            self._prune(now)

    def _prune(self, now: float) -> None:
        for key in [
            k
            for k, e in self.episodes.items()
            if not e.open and now - max(e.finished_at or 0, e.deadline) > KEEP_SECONDS
        ]:
            del self.episodes[key]
