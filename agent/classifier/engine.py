"""The classifier's state over time: the sliding window, warm-up after a job starts, holds during
checkpoints, hysteresis, learned baselines and the sustained-verdict events.

Time comes in with the calls (snapshot clocks, event arrival), never from the system clock, so a
synthetic snapshot sequence replays exactly the same in a test as it ran on a node.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from agent.classifier.baselines import PARTS, Baselines, learn
from agent.classifier.gathering import Gathering
from agent.classifier.running import RunningSums
from agent.classifier.samples import Sample, sample_from_snapshot
from agent.classifier.tallies import GpuTally, RunningTallies, tally
from agent.classifier.verdict import Judgement, classify, verdict_for
from agent.config.classifier import ClassifierSection
from agent.core.events import VerdictEvent
from agent.core.vocabulary import CHECKPOINT_ENDS, CheckpointPhase, Verdict
from agent.snapshot import NodeSnapshot

_PENDING = GpuTally()  # a sample not tallied yet (compared by identity)
LEARN_AT_ONCE = ("idle_power", "full_work")  # baselines parts learned in the evaluation itself (see _learn)


CHECKPOINT_HOLD = "checkpoint in progress"


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One evaluation: what it voted, what is in force, and why a change may be held back."""

    wall: float
    vote: Judgement  # this window's own decision
    current: Judgement | None  # the verdict in force after hysteresis (None before the first)
    held: str | None  # "warming up", "checkpoint in progress", "filling window"
    changed: bool
    events: tuple[VerdictEvent, ...] = ()


@dataclass
class Engine:
    cfg: ClassifierSection
    baselines: Baselines = field(default_factory=Baselines)

    def __post_init__(self) -> None:
        self.samples: deque[Sample] = deque()
        self.current: Judgement | None = None
        self.since_wall: float | None = None
        self.since_mono: float | None = None
        self.candidate: str | None = None
        self.count = 0
        self.undecided = False  # one mixed vote came between the candidate's votes
        self.changes_total = 0
        self.evaluations = 0
        self.published: VerdictEvent | None = None
        self.previous: str | None = None
        self.ignore_before = float("-inf")
        self.first_t: float | None = None
        self.warmup_until = float("-inf")
        self.new_job = False  # a job started: its first verdict after the warm-up needs no confirmations
        self.checkpoints: dict[str, float] = {}  # active request id -> when it started
        self.next_eval: float | None = None
        self.history: deque[dict[str, Any]] = deque(maxlen=self.cfg.history)
        self.last: Evaluation | None = None
        self.baselines_dirty = False
        self._recent_pids: dict[int, tuple[int, float]] = {}  # pid -> (start time, last seen)
        # each sample's GPU tally, aligned with ``samples``; _PENDING until an evaluation needs it
        # (a sample that arrives after the idle powers were relearned)
        self._tallied: deque[GpuTally] = deque()
        # the idle powers and full-work levels they were made with (the tables, compared by identity)
        self._tallied_with: tuple[dict[str, float], dict[str, float]] | None = None
        self.sums = RunningSums()
        self._gathering = Gathering()
        self._gpu_window = RunningTallies()
        self.learned_at: dict[str, float] = {}  # baselines part -> when it last learned
        # (window, parts, gathered data): learning an evaluation left for the next tick
        self._deferred: tuple[list[Sample], list[str], dict[str, Any]] | None = None

    # --- input -------------------------------------------------------------------------------------

    def add_snapshot(self, snap: NodeSnapshot) -> Evaluation | None:
        """Ingest one snapshot; returns an evaluation when one is due at this snapshot's time."""
        return self.add(sample_from_snapshot(snap))

    def add(self, s: Sample) -> Evaluation | None:
        self.settle()
        if self.first_t is None:
            self.first_t = s.t
            self.next_eval = s.t + self.cfg.evaluate_every
        self._watch_jobs(s)
        self.samples.append(s)
        # tallied now, while its GPU readings are fresh in the cache, with the idle powers the
        # tallies in hand were made with (another table: the next evaluation tallies them all again)
        # (and counted into the window's GPUs, which the next evaluation then only checks)
        if self._tallied_current():
            made = tally(s, self.baselines, self.cfg)
            self._tallied.append(made)
            self._gpu_window.push(made)
        else:
            self._tallied.append(_PENDING)
        self._gathering.add(s)
        self.sums.append(s)
        horizon = s.t - self.cfg.window
        while self.samples and self.samples[0].t <= horizon:
            self.samples.popleft()
            self._gpu_window.drop(self._tallied.popleft())
            self.sums.popleft()
        assert self.next_eval is not None
        if s.t + 1e-6 >= self.next_eval:
            # a late tick doesn't cause a burst of catch-up evaluations
            self.next_eval = max(self.next_eval + self.cfg.evaluate_every, s.t + self.cfg.evaluate_every / 2)
            return self.evaluate(s.t, s.wall)
        return None

    def _watch_jobs(self, s: Sample) -> None:
        """A training process not seen within the last window starts a job: warm up from here.
        Processes present when the agent starts are a job already running, not a new one.

        Processes are known by pid; the start time (0 when only NVML listed the pid) tells a reused
        pid from the same process, so a tick where the process collector missed it is no new job."""
        if s.trainers is None:
            return
        fresh = False
        recent = self._recent_pids
        for pid, start in s.trainers.keys:
            seen = recent.get(pid)
            if seen is None or (start and seen[0] and start != seen[0]):
                fresh = True
            recent[pid] = (start or (seen[0] if seen else 0), s.t)
        if fresh and s.t != self.first_t:
            # the window restarts inside the warm-up, so that it holds min_window_fill when the hold
            # ends: the job's first samples (workers starting, prefetching) are dropped, its last kept
            cfg = self.cfg
            self.warmup_until = s.t + cfg.warmup
            keep = cfg.min_window_fill * cfg.window
            self.ignore_before = max(self.ignore_before, s.t + max(0.0, cfg.warmup - keep))
            self.new_job = True
        if len(recent) > 64 or fresh:
            horizon = s.t - self.cfg.window
            self._recent_pids = {p: v for p, v in recent.items() if v[1] >= horizon}

    def checkpoint(self, phase: str, event_id: str, now: float) -> None:
        """A checkpoint request suppresses verdict changes until it is answered (or
        ``checkpoint_hold_max`` passes); what the window saw meanwhile is then dropped."""
        if phase == CheckpointPhase.REQUESTED:
            self.checkpoints[event_id] = now
        elif phase in CHECKPOINT_ENDS and self.checkpoints.pop(event_id, None) is not None:
            self.ignore_before = max(self.ignore_before, now)

    def _checkpoint_active(self, now: float) -> bool:
        expired = [k for k, t in self.checkpoints.items() if now - t > self.cfg.checkpoint_hold_max]
        for k in expired:
            del self.checkpoints[k]
            self.ignore_before = max(self.ignore_before, now)
        return bool(self.checkpoints)

    # --- evaluation --------------------------------------------------------------------------------

    def window(self) -> list[Sample]:
        return [s for s in self.samples if s.t >= self.ignore_before]

    def fill(self, now: float) -> float:
        if self.first_t is None:
            return 0.0
        start = max(self.first_t, self.ignore_before)
        return max(0.0, min(1.0, (now - start) / self.cfg.window + 1e-9))

    def evaluate(self, now: float, wall: float) -> Evaluation:
        self.settle()
        cfg = self.cfg
        self.evaluations += 1
        window = self.window()
        current = self.current.verdict if self.current else None
        tallies = self._tallies(window)
        vote = classify(
            window,
            self.baselines,
            cfg,
            None if self.new_job else current,  # a new job's vote owes nothing to the last job's band
            tallies,
            self.sums.means(len(window)),
            self._gpu_window.combine(tallies),
        )
        self._learn(window, now)
        held = None
        if now < self.warmup_until:
            held = "warming up"
        elif self._checkpoint_active(now):
            held = CHECKPOINT_HOLD
        elif self.fill(now) < cfg.min_window_fill or not window:
            held = "filling window"
        changed = False
        events: list[VerdictEvent] = []
        if current == Verdict.COMPUTE and vote.detail.compute_vetoed and held != CHECKPOINT_HOLD:
            # the GPUs spin more than they work: never leave that standing as compute, not even for
            # the confirmations or a warm-up's hold. A checkpoint's hold is the exception: the
            # trainer said it is saving, and while one rank writes its GPUs idle and the others
            # wait at the barrier, so a spin share then (a few percent of an idle window, as an
            # averaged reading smears the step before the save) says nothing against compute
            changed = True
            events += self._adopt(vote, now, wall)
        elif held is not None or vote.verdict == current:
            self.candidate, self.count = None, 0
            if held is None:
                self.new_job = False
        elif self.new_job and vote.verdict != "mixed":
            # the warm-up hold stood in for the confirmations: what is in force is from before the job
            self.new_job = False
            changed = True
            events += self._adopt(vote, now, wall)
        else:
            if vote.verdict == self.candidate:
                self.count += 1
            elif (
                vote.verdict == Verdict.MIXED
                and self.candidate not in (None, Verdict.MIXED)
                and not self.undecided
            ):
                # one undecided window (a TCP stall, a straggling read) is no vote against the
                # candidate: it neither confirms nor resets it; a second one does reset it
                self.undecided = True
            else:
                self.candidate, self.count, self.undecided = vote.verdict, 1, False
            if self.count >= cfg.confirmations:
                changed = True
                events += self._adopt(vote, now, wall)
        if self.current is not None and not changed:
            # keep the verdict in force, explained with this window's numbers
            kept = self.current
            self.current = (
                vote
                if vote.verdict == current
                else verdict_for(
                    vote.features,
                    vote.detail,
                    kept.verdict,
                    kept.sub_reason,
                    cfg.exit_score,
                    cfg.second_cause,
                )
            )
        events += self._sustained(now, wall)
        ev = Evaluation(wall, vote, self.current, held, changed, tuple(events))
        self.last = ev
        self.history.append(
            {
                "at": wall,
                "verdict": self.current.label if self.current else None,
                "vote": vote.label,
                "held": held,
                "scores": vote.scores,
                "reasons": vote.reasons,  # the vote's own numbers: why this window said what it did
            }
        )
        return ev

    def _adopt(self, vote: Judgement, now: float, wall: float) -> list[VerdictEvent]:
        events: list[VerdictEvent] = []
        previous = self.current.verdict if self.current else None
        if self.published is not None:
            events.append(self._cleared(self.published, vote))
            self.published = None
        if previous is not None:
            self.changes_total += 1
        self.current = vote
        self.previous = previous
        self.since_wall, self.since_mono = wall, now
        self.candidate, self.count = None, 0
        return events

    def _sustained(self, now: float, wall: float) -> list[VerdictEvent]:
        """A verdict in ``publish`` that has held for ``sustain`` is announced once."""
        cur = self.current
        if cur is None or self.published is not None or self.since_mono is None:
            return []
        if cur.verdict not in self.cfg.publish or now - self.since_mono < self.cfg.sustain:
            return []
        ev = VerdictEvent(
            verdict=cur.verdict,
            sub_reason=cur.sub_reason,
            reasons=cur.reasons,
            hint=cur.hint,
            since=datetime.fromtimestamp(self.since_wall if self.since_wall is not None else wall, UTC),
            scores=dict(cur.scores),
            gpus=cur.features.waiting_gpus,
            previous=self.previous,
        )
        self.published = ev
        return [ev]

    @staticmethod
    def _cleared(ended: VerdictEvent, now: Judgement) -> VerdictEvent:
        """The announced verdict ended; the reasons say what the node is now."""
        return VerdictEvent(
            verdict=ended.verdict,
            sub_reason=ended.sub_reason,
            reasons=(f"now {now.label}", *now.reasons),
            hint=now.hint,
            since=ended.since,
            scores=dict(now.scores),
            gpus=ended.gpus,
            cleared=True,
            previous=None,
        )

    def _learn(self, window: list[Sample], now: float) -> None:
        """Each part of the baselines learns once per window length (consecutive learning windows
        tile time: every sample counts once), spread over the evaluations so that no single one
        pays for all of them."""
        start = self.first_t if self.first_t is not None else now
        due = [p for p in PARTS if now - max(self.learned_at.get(p, start), start) >= self.cfg.window]
        if not due:
            return
        per_evaluation = math.ceil(len(PARTS) * self.cfg.evaluate_every / self.cfg.window)
        due.sort(key=lambda p: self.learned_at.get(p, start))
        parts = due[:per_evaluation]
        for p in parts:
            self.learned_at[p] = now
        gathered = self._gathering.take(window, parts)
        # the idle powers at once: the tallies made from the next sample on and the goodput
        # ledger's booking of this tick read them. The rest on the next tick, which does not
        # evaluate: the next evaluation is the first to read them, and an evaluation no longer also
        # pays for sorting a window's columns (the tail of the evaluations' cost)
        at_once = [p for p in parts if p in LEARN_AT_ONCE]
        later = [p for p in parts if p not in LEARN_AT_ONCE]
        if at_once:
            self._adopt_baselines(learn(window, self.baselines, at_once, gathered))
        if later:
            self._deferred = (window, later, gathered)

    @property
    def learning_pending(self) -> bool:
        return self._deferred is not None

    def settle(self) -> None:
        """Learn what the last evaluation left for the next tick (the next sample does this first;
        saving the baselines too)."""
        if self._deferred is not None:
            window, parts, gathered = self._deferred
            self._deferred = None
            self._adopt_baselines(learn(window, self.baselines, parts, gathered))

    def _adopt_baselines(self, new: Baselines) -> None:
        if new is not self.baselines:
            if not new.saved_same(self.baselines):
                self.baselines_dirty = True
            self.baselines = new

    def _tallied_current(self) -> bool:
        """Whether the tallies in hand were made with the baselines' GPU tables as they stand."""
        made = self._tallied_with
        b = self.baselines
        return made is not None and made[0] is b.idle_power and made[1] is b.full_work

    def _tallies(self, window: list[Sample]) -> list[GpuTally]:
        """Each sample's GPU tally, computed once per sample (again only if idle power was relearned).

        The window is the newest ``len(window)`` samples and only grows at its end, so the tallies
        it lacks are the newest ones: filled from the end back to the first one already made."""
        tallied, samples = self._tallied, self.samples
        first = len(samples) - len(window)
        if not window or samples[first] is not window[0]:  # not the newest samples: no memo
            return [tally(s, self.baselines, self.cfg) for s in window]
        if not self._tallied_current():
            tallied.clear()
            tallied.extend([_PENDING] * len(samples))
            self._tallied_with = (self.baselines.idle_power, self.baselines.full_work)
        i = len(samples) - 1
        while i >= first and tallied[i] is _PENDING:
            tallied[i] = tally(samples[i], self.baselines, self.cfg)
            i -= 1
        return list(islice(tallied, first, None))

    # --- views -------------------------------------------------------------------------------------

    def recent(self, n: int | None = None) -> Iterable[dict[str, Any]]:
        items = list(self.history)
        return items if n is None else items[-n:]
