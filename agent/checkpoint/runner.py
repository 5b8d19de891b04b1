"""One checkpoint episode carried through its steps: at ``act_at`` the request file and the signals,
then the ack wait with its escalation and deadline, each step published on the bus.

``episode.py`` decides every step; this module does what it says, through the trainers' reach
(``reach.py``), the target watch and the episode log, which it saves after each step so that a restart
resumes where the episode stood. The component (``component.py``) takes notices in and starts one
episode task each.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from agent.checkpoint import episode
from agent.checkpoint.episodelog import Episode, EpisodeLog
from agent.checkpoint.metrics import CheckpointMetrics
from agent.checkpoint.publish import trainer_notes
from agent.checkpoint.reach import TrainerReach
from agent.checkpoint.seen import seen_line
from agent.checkpoint.targets import Discovered
from agent.checkpoint.watch import TargetWatch
from agent.config.trainer import TrainerSection
from agent.core.aio import wait_within
from agent.core.events import CheckpointEvent, EventBus
from agent.core.vocabulary import UNREACHABLE_OUTCOMES, CheckpointPhase, DeliveryOutcome, EpisodeState

log = structlog.get_logger("checkpoint")

ACK_POLL_SECONDS = 0.2
MAX_SLEEP_SECONDS = 30.0  # long waits are cut so a wall-clock jump is noticed


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class EpisodeRunner:
    def __init__(
        self,
        bus: EventBus,
        tcfg: TrainerSection,
        signum: int,
        procfs: str,
        channels: TrainerReach,
        episode_log: EpisodeLog,
        watch: TargetWatch,
        stats: CheckpointMetrics,
        discovery_file: Path | None,
    ) -> None:
        self.bus = bus
        self.tcfg = tcfg
        self.signum = signum
        self.procfs = procfs
        self.channels = channels
        self.request_file = channels.request_file
        self.episode_log = episode_log
        self.watch = watch
        self.stats = stats
        self.discovery_file = discovery_file
        self.control_acks: dict[str, dict[str, Any]] = {}  # acks that came over the control socket
        self.wake = asyncio.Event()  # set: an ack wait looks again now (an ack, a new deadline)
        self.sending: set[asyncio.Task[None]] = set()  # requests going out; a stop lets them finish

    async def run(self, ep: Episode) -> None:
        """The episode from where the episode log left it to its end (or to cancellation)."""
        if ep.phase == EpisodeState.SCHEDULED:
            await _sleep_until(ep.act_at)
            await self.act(ep)
        elif ep.phase == EpisodeState.ACTING:
            # we died while signalling: do not signal twice; the request file is idempotent
            ep.problems.append("agent restarted while signalling: request file rewritten, no second signal")
            ep.phase = episode.on_resume(ep).state
            self.channels.write(ep, EpisodeState.REQUESTED)
            self.episode_log.save()
        elif ep.phase == EpisodeState.REQUESTED:
            step = episode.on_resume(ep)
            if step.request_state is not None:
                self.channels.update(ep, step.request_state)
        if ep.phase == EpisodeState.REQUESTED:
            await self.await_ack(ep)

    async def act(self, ep: Episode) -> None:
        found = await self.watch.rediscover()
        # From here the request goes out whatever happens to the episode's task: a reload's cancel
        # waits for it (the component's stop() awaits ``sending``). ``acting`` is recorded in send(),
        # right before the signals with no await between, so an episode stopped while discovering
        # is still ``scheduled`` and acted on by the next component; one saved as ``acting`` was
        # signalled, unless a kill -9 fell between that write and kill(2).
        task = asyncio.create_task(self.send(ep, found), name=f"checkpoint-send-{ep.event_id}")
        self.sending.add(task)
        task.add_done_callback(self.sending.discard)
        await asyncio.shield(task)

    async def send(self, ep: Episode, found: Discovered) -> None:
        if not ep.open:  # withdrawn before the send began
            return
        ep.requested_at = time.time()
        ep.problems.extend(found.problems)
        ep.channels["trainers"] = self.channels.trainers(self.watch.trainers, self.discovery_file)
        if not ep.dry_run:
            # the file goes first: a handler that looks at it right after the signal finds it
            self.channels.write(ep, EpisodeState.REQUESTED)
            ep.phase = EpisodeState.ACTING
            self.episode_log.save()
        deliveries = self.channels.signal(ep, found.targets, self.signum, self.procfs)
        await self.channels.post(ep)
        if not ep.open:  # withdrawn while the signals went out: the component marked it and the file
            self.episode_log.save()
            return
        step = episode.on_signals_sent([d.outcome for d in deliveries], ep.dry_run)
        ep.phase = step.state
        if ep.phase == EpisodeState.DRY_RUN:
            ep.finished_at = time.time()
            ep.channels.setdefault("file", f"would write {self.request_file}")
            log.info(
                "dry-run: nothing was sent",
                event_id=ep.event_id,
                would_signal=[
                    d.target.describe() for d in deliveries if d.outcome == DeliveryOutcome.DRY_RUN
                ],
            )
            self.episode_log.save()
            return
        self.episode_log.save()
        self.stats.requested(ep.drill)
        for phase in step.publish:
            if phase == CheckpointPhase.UNREACHABLE:
                unreachable = [d for d in deliveries if d.outcome in UNREACHABLE_OUTCOMES]
                self.publish(
                    ep,
                    phase,
                    targets=tuple(d.target.describe() for d in unreachable),
                    detail="; ".join(d.line() for d in unreachable)
                    + f"; not signalled, they must watch {self.request_file}",
                )
            elif phase == CheckpointPhase.NO_TARGET:
                why = "; ".join(found.problems) or f"discover = {self.tcfg.discover} found no process"
                log.warning(
                    "no checkpoint target found; only the request file was written",
                    event_id=ep.event_id,
                    why=why,
                )
                self.publish(ep, phase, detail=f"no training process found ({why}); request file written")
            else:
                reached = tuple(f"{d.target.describe()}: {d.outcome}" for d in deliveries)
                self.publish(ep, phase, targets=reached, detail=f"{self.tcfg.signal} and {self.request_file}")

    async def await_ack(self, ep: Episode) -> None:
        ack_file = self.channels.ack_file(ep)
        while True:
            ack = self.control_acks.get(ep.event_id) or self.channels.read_ack(ack_file, ep)
            if ack is not None:
                await self._record_who_saw(ep, ack)  # a cancel here leaves a control-socket ack kept
                self.control_acks.pop(ep.event_id, None)
                self._complete(ep, ack)
                return
            now = time.time()
            due = episode.on_time(ep, now)
            if episode.Wake.ESCALATE in due:
                await self._escalate(ep)
            if episode.Wake.MISS in due:
                await self._record_who_saw(ep, None)
                self._miss(ep)
                return
            self.wake.clear()
            await wait_within(self.wake, min(ACK_POLL_SECONDS, max(0.01, ep.deadline - now)))

    async def _record_who_saw(self, ep: Episode, ack: dict[str, Any] | None) -> None:
        """What happened replaces what was known when the request went out: the trainers that saw
        it, how and when (the ack, and the notes of those still running; rank 0 may have exited)."""
        notes = await asyncio.to_thread(trainer_notes, self.request_file.parent, self.procfs)
        line = seen_line(ep.event_id, ep.requested_at, ack, notes)
        if line is not None:
            ep.channels["trainers"] = line

    def _complete(self, ep: Episode, ack: dict[str, Any]) -> None:
        ep.ack = ack
        ep.finished_at = float(ack["at"])
        duration = ep.duration or 0.0
        step = episode.on_ack(ep, ep.finished_at)
        if step.late_ack:
            ep.late_ack = True
            self._miss(ep)
            return
        ep.phase = step.state
        self.stats.acknowledged(ep.drill, duration)
        self.episode_log.save()
        if step.request_state is not None:
            self.channels.update(ep, step.request_state)
        where = f" at {ack['path']}" if ack.get("path") else ""
        what = f"step {ack['step']}" if "step" in ack else "checkpoint"
        log.info(
            "checkpoint acknowledged",
            event_id=ep.event_id,
            via=ack["via"],
            duration_seconds=round(duration, 3),
            seconds_before_deadline=round(ep.deadline - ep.finished_at, 1),
            step=ack.get("step"),
            path=ack.get("path"),
        )
        self.publish(
            ep,
            CheckpointPhase.COMPLETED,
            duration=duration,
            detail=f"{what}{where}, {ep.deadline - ep.finished_at:.0f} s before the deadline",
        )

    def _miss(self, ep: Episode) -> None:
        step = episode.on_deadline(ep)
        ep.phase = step.state
        ep.finished_at = ep.finished_at or time.time()
        self.stats.deadline_missed(ep.drill)
        self.episode_log.save()
        if step.request_state is not None:
            self.channels.update(ep, step.request_state)
        log.error("checkpoint deadline missed", event_id=ep.event_id, kind=ep.kind, late_ack=ep.late_ack)
        self.publish(
            ep,
            CheckpointPhase.MISSED,
            duration=ep.duration,
            detail="the ack came after the deadline" if ep.late_ack else "no ack before the deadline",
        )

    async def _escalate(self, ep: Episode) -> None:
        ep.escalated = True
        ep.channels["escalation"] = await self.channels.escalate(ep, self.procfs)
        self.episode_log.save()
        log.warning(
            "final SIGTERM before the deadline", event_id=ep.event_id, results=ep.channels["escalation"]
        )
        self.publish(ep, CheckpointPhase.ESCALATED, detail=ep.channels["escalation"])

    def publish(
        self,
        ep: Episode,
        phase: CheckpointPhase,
        targets: tuple[str, ...] = (),
        detail: str = "",
        duration: float | None = None,
    ) -> None:
        self.bus.publish(
            CheckpointEvent(
                phase=phase,
                event_id=ep.event_id,
                notice_kind=ep.kind,
                deadline=_dt(ep.deadline),
                duration_seconds=duration,
                targets=targets,
                detail=detail,
                drill=ep.drill,
            )
        )


async def _sleep_until(ts: float) -> None:
    while (left := ts - time.time()) > 0:
        await asyncio.sleep(min(left, MAX_SLEEP_SECONDS))
