"""The ledger as a pure state machine: ticks, checkpoint events, periodic saves and interruptions in
(each with its time), the book and what is known about checkpoints out. No I/O, no clock of its own:
a test replays days in milliseconds.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from agent.core.vocabulary import CheckpointPhase
from agent.ledger.assign import (
    INDEX,
    WAITING,
    Bucket,
    GpuTime,
    LedgerReading,
    Pressures,
    Tick,
    assign_jobs,
    started,
)
from agent.ledger.book import Book
from agent.ledger.cadence import Advice, advise
from agent.ledger.saved import Saved

REQUEST_START = (CheckpointPhase.REQUESTED,)
# the notice's request file was written but no trainer was signalled: the GPUs' time stays as it
# is booked (nobody was asked to stop), and the notice's end is a reclaim all the same
UNSIGNALLED = (CheckpointPhase.NO_TARGET, CheckpointPhase.UNREACHABLE)
REQUEST_END = (CheckpointPhase.COMPLETED, CheckpointPhase.MISSED, CheckpointPhase.CANCELED)
KEEP_SAVES = 20
KEEP_JOBS = 256  # the names of this many jobs are kept for the report (the oldest go first)
OPEN_MAX = 1800.0  # a request without a deadline stays open this long at most
GRACE = 60.0
SAME_SAVE_SECONDS = 2.0  # reports this close together are one checkpoint seen by several ranks


@dataclass
class Reclaim:
    """What one notice's end cost: the work since the last durable checkpoint when the final
    checkpoint missed, nothing when it was acknowledged. For a drill: what a reclaim would cost."""

    event_id: str
    at: float
    drill: bool
    outcome: str  # CheckpointPhase.COMPLETED or .MISSED: the final checkpoint made it or not
    lost_gpu_seconds: float  # moved to lost-to-preemption (a drill moves nothing: what it would)
    since_durable: float | None  # seconds from the last durable checkpoint to the reclaim
    gpus: int
    stuck_gpu_seconds: float = 0.0  # lost work older than settle: left where it was counted
    jobs: dict[str, float] = field(default_factory=dict)  # job key -> its lost GPU-seconds

    @property
    def lost_seconds(self) -> float:
        """Wall-clock work lost: GPU-seconds over the node's GPUs."""
        return self.lost_gpu_seconds / self.gpus if self.gpus else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "at": self.at,
            "drill": self.drill,
            "outcome": self.outcome,
            "lost_gpu_seconds": round(self.lost_gpu_seconds, 3),
            "lost_seconds": round(self.lost_seconds, 3),
            "since_durable_seconds": None if self.since_durable is None else round(self.since_durable, 3),
            "gpus": self.gpus,
            "stuck_gpu_seconds": round(self.stuck_gpu_seconds, 3),
            "jobs": {k: round(v, 3) for k, v in self.jobs.items()},
        }


@dataclass
class Ledger:
    book: Book
    gpus: int = 0  # the node's GPU count at the last tick
    observed: float = 0.0  # wall seconds accounted
    interruptions: int = 0
    job: bool = False
    startup: bool = False
    job_since: float | None = None
    last_durable: float | None = None
    last_step: int | None = None
    saves: deque[tuple[float, float | None]] = field(default_factory=lambda: deque(maxlen=KEEP_SAVES))
    finals: deque[float] = field(default_factory=lambda: deque(maxlen=KEEP_SAVES))
    open_requests: dict[str, float] = field(default_factory=dict)  # event id -> open until
    unsignalled: dict[str, float] = field(default_factory=dict)  # event id -> open until
    reclaims: deque[Reclaim] = field(default_factory=lambda: deque(maxlen=20))
    ticks: int = 0
    spot_seen: bool = False  # the metadata service announced a spot notice on this node
    saving: float = 0.0  # money saved on spot against on-demand
    # job key -> {"name", "user", ...} as the jobs source last said it, newest last, KEEP_JOBS at most
    job_names: dict[str, dict[str, Any]] = field(default_factory=dict)

    # --- input -------------------------------------------------------------------------------------

    def tick(
        self,
        wall: float,
        seconds: float,
        gpus: Sequence[LedgerReading],
        states: Sequence[GpuTime],
        job: bool,
        pressures: Pressures,
        gpu_price: float | None,
        jobs: Sequence[str] = (),
        told: tuple[float, float] = (0.0, 0.0),
    ) -> list[float]:
        """One snapshot's interval, ``jobs`` the job key on each GPU (empty: no job on any). Returns
        the seconds per bucket it was booked as. ``told``: the shares of it the trainer said it spent
        saving and evaluating (``tna_client``)."""
        job = job or any(g.busy for g in gpus)
        if self.open_requests:
            self.open_requests = {k: until for k, until in self.open_requests.items() if until > wall}
        if self.unsignalled:
            self.unsignalled = {k: until for k, until in self.unsignalled.items() if until > wall}
        if job and not self.job:
            # a job appearing while we watch starts up; one running when the agent starts does not
            self.startup = self.ticks > 0
            self.job_since = wall
        elif not job:
            self.startup = False
            self.job_since = None
        self.job = job
        self.ticks += 1
        if gpus:
            self.gpus = len(gpus)
        t = Tick(
            seconds=seconds,
            gpus=tuple(gpus),
            job=job,
            pressures=pressures,
            checkpointing=bool(self.open_requests),
            startup=self.startup,
            jobs=tuple(jobs),
            saving=told[0],
            evaluating=told[1],
        )
        booked, by_job = assign_jobs(t, states)
        if self.startup and started(states):
            self.startup = False
        self.observed += max(0.0, seconds) if gpus else 0.0
        cost = [x * gpu_price for x in booked] if gpu_price else None
        # the slot holding its middle
        self.book.record(wall - max(0.0, seconds) / 2, booked, cost, by_job, gpu_price if cost else None)
        self.book.settle_until(wall)
        return booked

    def checkpoint(
        self,
        phase: str,
        event_id: str,
        at: float,
        drill: bool,
        duration: float | None,
        deadline: float | None = None,
    ) -> Reclaim | None:
        """The checkpoint handshake (``CheckpointEvent``). A notice's end is a reclaim: nothing lost
        when the final checkpoint was acknowledged, the work since the last durable one when not.
        An open request is kept until its deadline (and a grace) at most: an end that never came
        (the agent restarted meanwhile) must not book checkpoint time forever. A notice whose trainers
        could not be signalled (none found yet, or none safe to signal) books no checkpoint time, but
        its end is a reclaim all the same: the work since the last durable checkpoint is lost."""
        until = (deadline if deadline is not None else at + OPEN_MAX) + GRACE
        if phase in REQUEST_START:
            self.open_requests[event_id] = until
            self.unsignalled.pop(event_id, None)
            return None
        if phase in UNSIGNALLED:
            if event_id not in self.open_requests:
                self.unsignalled[event_id] = until
            return None
        if phase not in REQUEST_END:
            return None
        opened = self.open_requests.pop(event_id, None)
        unsignalled = self.unsignalled.pop(event_id, None)
        if phase == CheckpointPhase.CANCELED or (opened is None and unsignalled is None):
            return None
        if phase == CheckpointPhase.COMPLETED:
            if duration is not None and duration >= 0:
                self.finals.append(duration)
            self.last_durable = max(self.last_durable or at, at)
            r = Reclaim(event_id, at, drill, CheckpointPhase.COMPLETED, 0.0, 0.0, self.gpus)
        else:
            start = self.last_durable if self.last_durable is not None else self.job_since
            since = None if start is None else at - start
            t0 = start if start is not None else -math.inf
            by_job: dict[str, float] = {}
            if drill:
                by_job = self.productive_by_job(t0, at)
                lost = sum(by_job.values())
                stuck = 0.0
            else:
                lost, stuck = self.book.move((Bucket.PRODUCTIVE,), Bucket.LOST, t0, at, by_job=by_job)
                self.book.unmovable += stuck
            r = Reclaim(event_id, at, drill, CheckpointPhase.MISSED, lost, since, self.gpus, stuck, by_job)
        self.reclaims.append(r)
        return r

    def productive_by_job(self, t0: float, t1: float) -> dict[str, float]:
        """Productive GPU-seconds of each job between ``t0`` and ``t1`` (a slot partly inside gives
        its share): what a reclaim at ``t1`` would take from each."""
        res = self.book.resolution
        i = INDEX[Bucket.PRODUCTIVE]
        out: dict[str, float] = {}
        for s in self.book.recent(t0):
            share = max(0.0, min(s.start + res, t1) - max(s.start, t0)) / res
            for key, (js, _) in s.jobs.items():
                if js[i] > 0 and share > 0:
                    out[key] = out.get(key, 0.0) + share * js[i]
        return out

    def name_jobs(self, jobs: Sequence[dict[str, Any]]) -> None:
        """Remember what the jobs seen this tick are called (the report names them after they ended)."""
        for j in jobs:
            key = str(j.get("job_id"))
            if self.job_names.get(key) != j:
                self.job_names.pop(key, None)
                self.job_names[key] = dict(j)
        while len(self.job_names) > KEEP_JOBS:
            del self.job_names[next(iter(self.job_names))]

    def job_advice(self, key: str, advice: dict[str, Any]) -> None:
        """What to rent next time, for a job that ended (agent.advice): kept in its record, shown by
        ``report --by job``."""
        if key in self.job_names:
            self.job_names[key]["advice"] = advice

    def _productive_between(self, t0: float, t1: float) -> float:
        res = self.book.resolution
        i = INDEX[Bucket.PRODUCTIVE]
        total = 0.0
        for s in self.book.recent(t0):
            share = max(0.0, min(s.start + res, t1) - max(s.start, t0)) / res
            total += share * s.seconds[i]
        return total

    def saved(self, report: Saved) -> float:
        """A periodic checkpoint became durable: the time it took becomes ``checkpoint`` (taken from
        what the GPUs were waiting on meanwhile, never from productive work). Returns GPU-seconds
        moved."""
        moved = 0.0
        if self.saves and abs(report.time - self.saves[-1][0]) < SAME_SAVE_SECONDS:
            return 0.0
        if report.seconds:
            limit = report.seconds * max(1, self.gpus)
            moved, _ = self.book.move(
                WAITING, Bucket.CHECKPOINT, report.time - report.seconds, report.time, limit
            )
        self.saves.append((report.time, report.seconds))
        self.last_durable = max(self.last_durable or report.time, report.time)
        if report.step is not None:
            self.last_step = report.step
        return moved

    def interruption(self) -> None:
        self.interruptions += 1

    # --- what is known -----------------------------------------------------------------------------

    def checkpoint_cost(self) -> tuple[float | None, str]:
        costs = [s for _, s in self.saves if s is not None]
        if costs:
            return median(costs), "periodic saves"
        if self.finals:
            return median(self.finals), "final checkpoints"
        return None, ""

    def interval(self, now: float) -> float | None:
        """How often the job checkpoints: the usual gap between periodic saves, or the time since the
        last one (or the job's start) when that is longer. None without a job."""
        if not self.job:
            return None
        times = [t for t, _ in self.saves]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        # the periodic saves only: a final checkpoint at a notice says nothing about the cadence
        since = times[-1] if times else self.job_since
        current = max(median(gaps) if gaps else 0.0, now - since if since is not None else 0.0)
        return current or None

    def mtbi(self, configured: float | None) -> tuple[float | None, str]:
        if configured:
            return configured, "config"
        if self.interruptions:
            return self.observed / self.interruptions, "node history"
        if self.observed > 0:
            return self.observed, "lower bound"
        return None, ""

    def advice(self, now: float, configured_mtbi: float | None, sparse_factor: float) -> Advice | None:
        cost, cost_source = self.checkpoint_cost()
        mtbi, mtbi_source = self.mtbi(configured_mtbi)
        return advise(cost, cost_source, mtbi, mtbi_source, self.interval(now), sparse_factor)

    def would_lose(self, now: float) -> float:
        """GPU-seconds of productive work a reclaim now would lose."""
        start = self.last_durable if self.last_durable is not None else self.job_since
        return self._productive_between(start if start is not None else -math.inf, now)

    def would_lose_by_job(self, now: float) -> dict[str, float]:
        """:meth:`would_lose`, by job."""
        start = self.last_durable if self.last_durable is not None else self.job_since
        return self.productive_by_job(start if start is not None else -math.inf, now)

    # --- persistence -------------------------------------------------------------------------------

    def to_json(self, book: bool = True) -> dict[str, Any]:
        """Everything, or (``book=False``) everything but the book."""
        return {
            **({"book": self.book.to_json()} if book else {}),
            "gpus": self.gpus,
            "observed": self.observed,
            "interruptions": self.interruptions,
            "job": self.job,
            "startup": self.startup,
            "job_since": self.job_since,
            "last_durable": self.last_durable,
            "last_step": self.last_step,
            "saves": [list(s) for s in self.saves],
            "finals": list(self.finals),
            "reclaims": [r.as_dict() for r in self.reclaims],
            "open_requests": dict(self.open_requests),
            "unsignalled": dict(self.unsignalled),
            "spot_seen": self.spot_seen,
            "saving": self.saving,
            "job_names": self.job_names,
        }
