"""The checkpoint action: a notice arrives, the training processes are asked to checkpoint before the
deadline, and the operator learns whether they made it.

One episode per notice: ``episode.py`` decides each step (a pure state machine), this module does
the I/O: signals and the request file (``channels.py``, ``signals.py``), the ledger that makes an
episode survive restarts so that no notice is acted on twice, and the bus. The control handlers are
in ``control.py``, the status in ``status.py``, the metrics in ``metrics.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import structlog
from prometheus_client.core import Metric

from agent.checkpoint import control, episode
from agent.checkpoint import status as checkpoint_status
from agent.checkpoint.channels import Channels
from agent.checkpoint.ledger import Episode, Ledger
from agent.checkpoint.metrics import CheckpointMetrics
from agent.checkpoint.policy import Plan, acts_on, moved_earlier, plan
from agent.checkpoint.publish import agent_identity, discovery_path, publish_logged, unpublish
from agent.checkpoint.report import build_report
from agent.checkpoint.request import prepare_dir
from agent.checkpoint.watch import TargetWatch
from agent.config.trainer import signal_number
from agent.core.component import Context, Route
from agent.core.events import CheckpointEvent, PreemptionEvent
from agent.core.vocabulary import UNREACHABLE_OUTCOMES, CheckpointPhase, DeliveryOutcome, EpisodeState

log = structlog.get_logger("checkpoint")

ACK_POLL_SECONDS = 0.2
MAX_SLEEP_SECONDS = 30.0  # long waits are cut so a wall-clock jump is noticed


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class CheckpointComponent:
    name = "checkpoint"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.tcfg = ctx.cfg.trainer
        self.signum = signal_number(self.tcfg.signal)
        self.procfs = ctx.cfg.agent.procfs
        self.request_file = self.tcfg.request_path(ctx.runtime_dir)
        self.discovery_file = discovery_path(self.tcfg.discovery_file)
        self.identity = agent_identity(self.procfs)
        self.channels = Channels(self.tcfg, self.request_file, self.identity)
        self.ledger = Ledger(ctx.state_dir / "checkpoint-ledger.json")
        self.watch = TargetWatch(ctx, self.tcfg, self.signum, self.request_file)
        self.stats = CheckpointMetrics()
        self._queue = ctx.bus.subscribe("checkpoint", (PreemptionEvent,))
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._done: dict[str, asyncio.Future[None]] = {}
        self._control_acks: dict[str, dict[str, Any]] = {}
        self._wake = asyncio.Event()
        self._force_dry: set[str] = set()
        self._loaded = False

    # --- sources -----------------------------------------------------------------------------------

    def current_pids(self) -> list[int]:
        """The targets found at the last discovery (for the process collector)."""
        return [t.pid for t in self.watch.found.targets]

    # --- lifecycle ---------------------------------------------------------------------------------

    async def run(self) -> None:
        if not self._loaded:
            await asyncio.to_thread(self._load)
            self._loaded = True
            for ep in self.ledger.episodes.values():
                if ep.open:
                    log.info(
                        "resuming checkpoint episode after restart", event_id=ep.event_id, phase=ep.phase
                    )
                    self._start(ep)
        refresher = asyncio.create_task(self.watch.refresh_loop(), name="checkpoint-discovery")
        try:
            while True:
                ev = await self._queue.get()
                assert isinstance(ev, PreemptionEvent)
                try:
                    self._on_notice(ev)
                except OSError as e:  # state dir full or read-only: say so, keep serving
                    log.error("cannot record the checkpoint episode", event_id=ev.event_id, error=str(e))
        finally:
            refresher.cancel()

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(OSError):
            await asyncio.to_thread(self.ledger.save)
        if self.discovery_file is not None:
            unpublish(self.discovery_file, self.identity)

    def _load(self) -> None:
        self.ledger.load()
        self.ledger.prune(time.time())
        prepare_dir(self.request_file.parent)
        if self.discovery_file is not None:
            publish_logged(self.discovery_file, self.request_file, self.identity, self.tcfg.signal)

    # --- notices -----------------------------------------------------------------------------------

    def _on_notice(self, ev: PreemptionEvent) -> None:
        if ev.withdrawn:
            self._cancel(ev.event_id, f"the cloud withdrew the {ev.kind} notice")
            return
        known = self.ledger.episodes.get(ev.event_id)
        if known is not None:
            again = episode.on_notice_again(known, ev.deadline.timestamp() if ev.deadline else None)
            if again == episode.Again.RESCHEDULE:
                log.info(
                    "notice rescheduled",
                    event_id=ev.event_id,
                    deadline=ev.deadline.isoformat() if ev.deadline else None,
                )
                task = self._tasks.pop(ev.event_id, None)
                if task is not None:
                    task.cancel()
                del self.ledger.episodes[ev.event_id]
            elif again == episode.Again.MOVE_EARLIER and ev.deadline is not None:
                self._deadline_moved_earlier(known, ev.deadline)
                return
            else:
                log.debug("notice already handled", event_id=ev.event_id, phase=known.phase)
                return
        if not ev.drill and not acts_on(ev.kind, self.tcfg.act_on):
            log.info("notice kind does not call for a checkpoint ([trainer] act_on)", kind=ev.kind)
            return
        now = datetime.now(UTC)
        p = plan(
            ev, now, self.tcfg.checkpoint_budget, self.tcfg.escalate_before, self.tcfg.no_deadline_window
        )
        ep = Episode(
            event_id=ev.event_id,
            provider=ev.provider,
            kind=ev.kind,
            deadline=p.deadline.timestamp(),
            received_at=ev.received_at.timestamp(),
            act_at=p.act_at.timestamp(),
            escalate_at=p.escalate_at.timestamp() if p.escalate_at else None,
            drill=ev.drill,
            dry_run=self.tcfg.dry_run or ev.event_id in self._force_dry,
        )
        self.ledger.episodes[ep.event_id] = ep
        self.ledger.save()
        if ep.act_at > time.time() + 1:
            log.info(
                "checkpoint scheduled",
                event_id=ep.event_id,
                kind=ep.kind,
                act_in_seconds=round(ep.act_at - time.time()),
                deadline=p.deadline.isoformat(),
            )
        self._start(ep)

    def _deadline_moved_earlier(self, ep: Episode, deadline: datetime) -> None:
        """The same notice with an earlier deadline, after the request went out: the episode's ack
        window and escalation follow the new deadline; no second request, no second signal."""
        current = Plan(
            act_at=_dt(ep.act_at),
            deadline=_dt(ep.deadline),
            escalate_at=_dt(ep.escalate_at) if ep.escalate_at is not None else None,
        )
        p = moved_earlier(current, deadline, datetime.now(UTC), self.tcfg.escalate_before)
        ep.deadline = p.deadline.timestamp()
        if not ep.escalated:
            ep.escalate_at = p.escalate_at.timestamp() if p.escalate_at else None
        ep.problems.append(f"the cloud moved the deadline earlier, to {p.deadline.isoformat()}")
        self.ledger.save()
        if ep.phase == EpisodeState.REQUESTED and not ep.dry_run:
            # the trainer sees the new deadline; the same event id tells it this is no new request
            self.channels.write(ep, EpisodeState.REQUESTED)
        log.warning(
            "checkpoint deadline moved earlier",
            event_id=ep.event_id,
            phase=ep.phase,
            deadline=p.deadline.isoformat(),
            seconds_left=round(ep.deadline - time.time(), 1),
            escalate_at=p.escalate_at.isoformat() if p.escalate_at and not ep.escalated else None,
        )
        self._wake.set()  # the ack wait looks at the new deadline and escalation time now

    def _start(self, ep: Episode) -> None:
        self._done.setdefault(ep.event_id, asyncio.get_running_loop().create_future())
        self._tasks[ep.event_id] = asyncio.create_task(self._episode(ep), name=f"checkpoint-{ep.event_id}")

    async def _episode(self, ep: Episode) -> None:
        try:
            if ep.phase == EpisodeState.SCHEDULED:
                await _sleep_until(ep.act_at)
                await self._act(ep)
            elif ep.phase == EpisodeState.ACTING:
                # we died while signalling: do not signal twice; the request file is idempotent
                ep.problems.append(
                    "agent restarted while signalling: request file rewritten, no second signal"
                )
                ep.phase = episode.on_resume(ep).state
                self.channels.write(ep, EpisodeState.REQUESTED)
                self.ledger.save()
            elif ep.phase == EpisodeState.REQUESTED:
                step = episode.on_resume(ep)
                if step.request_state is not None:
                    self.channels.update(ep, step.request_state)
            if ep.phase == EpisodeState.REQUESTED:
                await self._await_ack(ep)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("checkpoint episode failed", event_id=ep.event_id)
            raise
        finally:
            if self._tasks.get(ep.event_id) is asyncio.current_task():
                del self._tasks[ep.event_id]
            self._finish(ep)

    def _finish(self, ep: Episode) -> None:
        fut = self._done.get(ep.event_id)
        if fut is not None and not fut.done() and not ep.open:
            fut.set_result(None)

    # --- acting ------------------------------------------------------------------------------------

    async def _act(self, ep: Episode) -> None:
        ep.requested_at = time.time()
        if not ep.dry_run:
            ep.phase = EpisodeState.ACTING
            self.ledger.save()
        found = await self.watch.rediscover()
        ep.problems.extend(found.problems)
        ep.channels["trainers"] = self.channels.trainers(self.watch.trainers, self.discovery_file)
        if not ep.dry_run:
            # the file goes first: a handler that looks at it right after the signal finds it
            self.channels.write(ep, EpisodeState.REQUESTED)
        deliveries = await self.channels.signal(ep, found.targets, self.signum, self.procfs)
        await self.channels.post(ep)
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
            self.ledger.save()
            return
        self.ledger.save()
        self.stats.requested(ep.drill)
        for phase in step.publish:
            if phase == CheckpointPhase.UNREACHABLE:
                unreachable = [d for d in deliveries if d.outcome in UNREACHABLE_OUTCOMES]
                self._publish(
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
                self._publish(ep, phase, detail=f"no training process found ({why}); request file written")
            else:
                reached = tuple(f"{d.target.describe()}: {d.outcome}" for d in deliveries)
                self._publish(
                    ep, phase, targets=reached, detail=f"{self.tcfg.signal} and {self.request_file}"
                )

    async def _await_ack(self, ep: Episode) -> None:
        ack_file = self.channels.ack_file(ep)
        while True:
            ack = self._control_acks.pop(ep.event_id, None) or self.channels.read_ack(ack_file, ep)
            if ack is not None:
                self._complete(ep, ack)
                return
            now = time.time()
            due = episode.on_time(ep, now)
            if episode.Wake.ESCALATE in due:
                await self._escalate(ep)
            if episode.Wake.MISS in due:
                self._miss(ep)
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(ACK_POLL_SECONDS, max(0.01, ep.deadline - now)))

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
        self.ledger.save()
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
        self._publish(
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
        self.ledger.save()
        if step.request_state is not None:
            self.channels.update(ep, step.request_state)
        log.error("checkpoint deadline missed", event_id=ep.event_id, kind=ep.kind, late_ack=ep.late_ack)
        self._publish(
            ep,
            CheckpointPhase.MISSED,
            duration=ep.duration,
            detail="the ack came after the deadline" if ep.late_ack else "no ack before the deadline",
        )

    async def _escalate(self, ep: Episode) -> None:
        ep.escalated = True
        ep.channels["escalation"] = await self.channels.escalate(ep, self.procfs)
        self.ledger.save()
        log.warning(
            "final SIGTERM before the deadline", event_id=ep.event_id, results=ep.channels["escalation"]
        )
        self._publish(ep, CheckpointPhase.ESCALATED, detail=ep.channels["escalation"])

    def _cancel(self, event_id: str, why: str) -> None:
        ep = self.ledger.episodes.get(event_id)
        step = episode.on_withdrawn(ep) if ep is not None else None
        if ep is None or step is None:
            log.info("withdrawn notice had nothing pending", event_id=event_id)
            return
        task = self._tasks.pop(event_id, None)
        if task is not None:
            task.cancel()
        ep.phase = step.state
        ep.finished_at = time.time()
        ep.problems.append(why)
        self.ledger.save()
        if step.request_state is not None:
            self.channels.update(ep, step.request_state)
        log.info(
            "checkpoint canceled", event_id=event_id, why=why, had_signalled=step.request_state is not None
        )
        self._publish(ep, CheckpointPhase.CANCELED, detail=why)
        self._finish(ep)

    def _publish(
        self,
        ep: Episode,
        phase: CheckpointPhase,
        targets: tuple[str, ...] = (),
        detail: str = "",
        duration: float | None = None,
    ) -> None:
        self.ctx.bus.publish(
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

    # --- control socket ----------------------------------------------------------------------------

    def control_routes(self) -> list[Route]:
        return control.routes(self)

    def _open_requested(self) -> list[Episode]:
        eps = [e for e in self.ledger.episodes.values() if e.phase == EpisodeState.REQUESTED]
        return sorted(eps, key=lambda e: e.requested_at or 0)

    def report(self, ep: Episode) -> dict[str, Any]:
        provider = self.ctx.cfg.preemption.provider
        return build_report(ep, self.ctx.cfg.preemption.poll_interval + 0.1, provider)

    # --- faces -------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return checkpoint_status.status(self)

    def metrics(self) -> Iterable[Metric]:
        unsignalable = sum(1 for v in self.watch.handlers.values() if v in ("no-handler", "ignored"))
        return self.stats.families(len(self.watch.found.targets), unsignalable, len(self._open_requested()))


async def _sleep_until(ts: float) -> None:
    while (left := ts - time.time()) > 0:
        await asyncio.sleep(min(left, MAX_SLEEP_SECONDS))
