"""The checkpoint action: a notice arrives, the training processes are asked to checkpoint before the
deadline, and the operator learns whether they made it.

One episode per notice: this module takes the notices in (a new one, the same one again, an earlier
deadline, a withdrawal), keeps the episode log that makes an episode survive restarts so that no notice is
acted on twice, and runs one task per open episode. ``episode.py`` decides each step (a pure state
machine), ``runner.py`` carries it out (signals and the request file through ``reach.py``, the ack
wait, escalation, the bus). The control handlers are in ``control.py``, the status in ``status.py``,
the metrics in ``metrics.py``.
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
from agent.checkpoint.episodelog import Episode, EpisodeLog
from agent.checkpoint.metrics import CheckpointMetrics
from agent.checkpoint.policy import Plan, acts_on, moved_earlier, plan
from agent.checkpoint.publish import agent_identity, discovery_path, publish_logged, unpublish
from agent.checkpoint.reach import TrainerReach
from agent.checkpoint.report import build_report
from agent.checkpoint.request import prepare_dir
from agent.checkpoint.runner import EpisodeRunner
from agent.checkpoint.targets import Discovered
from agent.checkpoint.watch import TargetWatch
from agent.config.trainer import signal_number
from agent.context import Context
from agent.core.component import HasMetrics, HasPids, HasRoutes, HasStatus, Route
from agent.core.events import PreemptionEvent
from agent.core.vocabulary import UNSIGNALABLE, CheckpointPhase, EpisodeState, HandlerState
from agent.snapshot import NodeSnapshot
from agent.sources.jobs.part import JobPart

log = structlog.get_logger("checkpoint")


def jobs_on_node(snap: NodeSnapshot) -> list[dict[str, Any]]:
    """The jobs source's record of the node's jobs, each with its training processes."""
    part = snap.part(JobPart)
    if part is None:
        return []
    return [
        {**j.as_dict(), "pids": sorted(p for p, job in part.pids.items() if job == j.job_id)}
        for j in part.jobs
    ]


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class CheckpointComponent(HasMetrics, HasPids, HasRoutes, HasStatus):
    name = "checkpoint"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.tcfg = ctx.cfg.trainer
        self.signum = signal_number(self.tcfg.signal)
        self.procfs = ctx.cfg.agent.procfs
        self.request_file = self.tcfg.request_path(ctx.runtime_dir)
        self.discovery_file = discovery_path(self.tcfg.discovery_file)
        self.identity = agent_identity(self.procfs)
        self.channels = TrainerReach(self.tcfg, self.request_file, self.identity)
        self.episode_log = EpisodeLog(ctx.state_dir / "checkpoint-ledger.json")
        self.watch = TargetWatch(ctx, self.tcfg, self.signum, self.request_file)
        self.stats = CheckpointMetrics()
        self.runner = EpisodeRunner(
            ctx.bus,
            self.tcfg,
            self.signum,
            self.procfs,
            self.channels,
            self.episode_log,
            self.watch,
            self.stats,
            self.discovery_file,
        )
        self._queue = ctx.bus.subscribe("checkpoint", (PreemptionEvent,))
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._done: dict[str, asyncio.Future[None]] = {}
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
            for ep in self.episode_log.episodes.values():
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
        # a request already going out finishes, so the episode log saved below says what was sent
        await asyncio.gather(*self.runner.sending, return_exceptions=True)
        with contextlib.suppress(OSError):
            await asyncio.to_thread(self.episode_log.save)
        if self.discovery_file is not None:
            unpublish(self.discovery_file, self.identity)

    def _load(self) -> None:
        self.episode_log.load()
        self.episode_log.prune(time.time())
        prepare_dir(self.request_file.parent)
        if self.discovery_file is not None:
            publish_logged(
                self.discovery_file, self.request_file, self.identity, self.tcfg.signal, self.tcfg.step_report
            )

    # --- notices -----------------------------------------------------------------------------------

    def _on_notice(self, ev: PreemptionEvent) -> None:
        if ev.withdrawn:
            self.cancel(ev.event_id, f"the cloud withdrew the {ev.kind} notice")
            return
        known = self.episode_log.episodes.get(ev.event_id)
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
                del self.episode_log.episodes[ev.event_id]
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
            jobs=jobs_on_node(self.ctx.latest()),
        )
        self.episode_log.episodes[ep.event_id] = ep
        self.episode_log.save()
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
        self.episode_log.save()
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
        self.runner.wake.set()  # the ack wait looks at the new deadline and escalation time now

    def _start(self, ep: Episode) -> None:
        self._done.setdefault(ep.event_id, asyncio.get_running_loop().create_future())
        self._tasks[ep.event_id] = asyncio.create_task(self._episode(ep), name=f"checkpoint-{ep.event_id}")

    async def _episode(self, ep: Episode) -> None:
        try:
            await self.runner.run(ep)
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

    # --- withdrawal --------------------------------------------------------------------------------

    def cancel(self, event_id: str, why: str) -> None:
        ep = self.episode_log.episodes.get(event_id)
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
        self.episode_log.save()
        if step.request_state is not None:
            self.channels.update(ep, step.request_state)
        log.info(
            "checkpoint canceled", event_id=event_id, why=why, had_signalled=step.request_state is not None
        )
        self.runner.publish(ep, CheckpointPhase.CANCELED, detail=why)
        self._finish(ep)

    # --- control socket ----------------------------------------------------------------------------

    def control_routes(self) -> list[Route]:
        return control.routes(self)

    def finished(self, event_id: str) -> asyncio.Future[None] | None:
        """Done when the episode ``event_id`` ends (None when none was started)."""
        return self._done.get(event_id)

    def begin_drill(self, event_id: str, dry_run: bool) -> asyncio.Future[None]:
        """Before a drill's notice goes out: the future its end sets, and whether it sends nothing."""
        if dry_run:
            self._force_dry.add(event_id)
        done = asyncio.get_running_loop().create_future()
        self._done[event_id] = done
        return done

    def end_drill(self, event_id: str) -> None:
        self._force_dry.discard(event_id)

    def open_requested(self) -> list[Episode]:
        eps = [e for e in self.episode_log.episodes.values() if e.phase == EpisodeState.REQUESTED]
        return sorted(eps, key=lambda e: e.requested_at or 0)

    def find_episode(self, event_id: str) -> Episode | None:
        return self.episode_log.episodes.get(event_id)

    def acknowledge(self, event_id: str, ack: dict[str, Any]) -> None:
        """An ack that came over the control socket: the episode's ack wait takes it now."""
        self.runner.control_acks[event_id] = ack
        self.runner.wake.set()

    def post_notice(self, ev: PreemptionEvent) -> None:
        self.ctx.bus.publish(ev)

    def report(self, ep: Episode) -> dict[str, Any]:
        provider = self.ctx.cfg.preemption.provider
        return build_report(ep, self.ctx.cfg.preemption.poll_interval + 0.1, provider)

    # --- faces -------------------------------------------------------------------------------------

    def episodes(self) -> list[Episode]:
        return list(self.episode_log.episodes.values())

    def found(self) -> Discovered:
        """The targets and the problems of the last discovery."""
        return self.watch.found

    def handler(self, pid: int) -> HandlerState:
        return self.watch.handlers.get(pid, HandlerState.UNKNOWN)

    def trainers(self) -> list[dict[str, Any]]:
        """The notes the trainers left beside the request file."""
        return self.watch.trainers

    def status(self) -> dict[str, Any]:
        return checkpoint_status.status(self)

    def metrics(self) -> Iterable[Metric]:
        unsignalable = sum(1 for v in self.watch.handlers.values() if v in UNSIGNALABLE)
        return self.stats.families(len(self.watch.found.targets), unsignalable, len(self.open_requested()))
