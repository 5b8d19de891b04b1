"""The checkpoint action: a notice arrives, the training processes are asked to checkpoint before the
deadline, and the operator learns whether they made it.

One episode per notice (see ``ledger.py``): scheduled -> acting -> requested -> completed | missed,
or canceled when the cloud withdraws the notice. Each episode is a task; the ledger makes it survive
restarts, so no notice is acted on twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from agent.checkpoint.ledger import Episode, Ledger
from agent.checkpoint.policy import Plan, acts_on, moved_earlier, plan
from agent.checkpoint.publish import (
    agent_identity,
    discovery_path,
    publish,
    trainer_notes,
    trainers_line,
    unpublish,
)
from agent.checkpoint.report import build_report
from agent.checkpoint.request import (
    ack_path,
    clean_ack,
    post_request,
    prepare_dir,
    read_ack,
    request_payload,
    write_request,
)
from agent.checkpoint.signals import Delivery, deliver, handler_state
from agent.checkpoint.targets import Discovered, Discovery, Target, age_seconds
from agent.config.trainer import signal_number
from agent.core.component import Context, Route
from agent.core.events import CheckpointEvent, PreemptionEvent
from agent.core.vocabulary import (
    UNREACHABLE_OUTCOMES,
    CheckpointPhase,
    DeliveryOutcome,
    EpisodeState,
    NoticeKind,
)

log = structlog.get_logger("checkpoint")

ACK_POLL_SECONDS = 0.2
MAX_SLEEP_SECONDS = 30.0  # long waits are cut so a wall-clock jump is noticed
DURATION_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_KIND = re.compile(r"^[a-z][a-z0-9-]{0,63}$")


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class _Stats:
    """Counters and the duration histogram, split by drill="true|false"."""

    def __init__(self) -> None:
        self.requests = {"false": 0, "true": 0}
        self.completed = {"false": 0, "true": 0}
        self.missed = {"false": 0, "true": 0}
        self.buckets = {k: [0] * (len(DURATION_BUCKETS) + 1) for k in ("false", "true")}
        self.sums = {"false": 0.0, "true": 0.0}

    def observe(self, drill: bool, seconds: float) -> None:
        key = "true" if drill else "false"
        self.sums[key] += seconds
        # one count in the first bucket that holds it; metrics() makes them cumulative
        i = next((i for i, le in enumerate(DURATION_BUCKETS) if seconds <= le), len(DURATION_BUCKETS))
        self.buckets[key][i] += 1


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
        self.trainers: list[dict[str, Any]] = []  # processes that found the request file (their notes)
        self._logged_targets: list[str] = []
        self.ledger = Ledger(ctx.state_dir / "checkpoint-ledger.json")
        self.discovery = Discovery(
            list(self.tcfg.discover), self.procfs, ctx.cfg.agent.sysfs, gpu_pids=self._gpu_pids
        )
        self.found = Discovered(())
        self.handlers: dict[int, str] = {}  # pid -> handler state for the configured signal
        self.stats = _Stats()
        self._queue = ctx.bus.subscribe("checkpoint", (PreemptionEvent,))
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._done: dict[str, asyncio.Future[None]] = {}
        self._control_acks: dict[str, dict[str, Any]] = {}
        self._wake = asyncio.Event()
        self._force_dry: set[str] = set()
        self._loaded = False
        self._bad_ack_logged: set[str] = set()

    # --- sources -----------------------------------------------------------------------------------

    def _gpu_pids(self) -> list[int]:
        snap = self.ctx.latest()
        if snap.gpu is None:
            return []
        return [p.pid for g in snap.gpu.gpus for p in g.processes]

    def current_pids(self) -> list[int]:
        """The targets found at the last discovery (for the process collector)."""
        return [t.pid for t in self.found.targets]

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
        refresher = asyncio.create_task(self._refresh_loop(), name="checkpoint-discovery")
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
            try:
                publish(self.discovery_file, self.request_file, self.identity, self.tcfg.signal)
                log.info("trainers find this agent through", discovery_file=str(self.discovery_file))
            except OSError as e:
                log.error(
                    "cannot publish the discovery record; trainers need $TNA_CHECKPOINT_REQUEST_FILE",
                    discovery_file=str(self.discovery_file),
                    request_file=str(self.request_file),
                    error=str(e),
                )

    async def _refresh_loop(self) -> None:
        while True:
            await self._rediscover()
            await asyncio.sleep(self.tcfg.discover_interval)

    async def _rediscover(self) -> Discovered:
        found = await asyncio.to_thread(self.discovery.discover)
        handlers = await asyncio.to_thread(
            lambda: {t.pid: handler_state(self.procfs, t.pid, self.signum) for t in found.targets}
        )
        shown = await asyncio.to_thread(
            lambda: [
                f"{t.describe()} via {t.source}, {self._shown(t, handlers.get(t.pid))}" for t in found.targets
            ]
        )
        if shown != self._logged_targets:
            self._logged_targets = shown
            log.info("checkpoint targets", targets=shown, problems=list(found.problems))
        self.found, self.handlers = found, handlers
        self.trainers = await asyncio.to_thread(trainer_notes, self.request_file.parent, self.procfs)
        return found

    def _shown(self, t: Target, state: str | None) -> str:
        """The handler state for the log: a young process without one is still starting (frameworks
        install their handler after imports and set-up), not a target that would be killed."""
        if state == "no-handler":
            age = age_seconds(self.procfs, t)
            if age is not None and age < self.tcfg.startup_grace:
                return f"starting ({age:.0f} s old, no handler yet)"
        return str(state)

    # --- notices -----------------------------------------------------------------------------------

    def _on_notice(self, ev: PreemptionEvent) -> None:
        if ev.withdrawn:
            self._cancel(ev.event_id, f"the cloud withdrew the {ev.kind} notice")
            return
        known = self.ledger.episodes.get(ev.event_id)
        if known is not None:
            if (
                known.phase == EpisodeState.SCHEDULED
                and ev.deadline
                and ev.deadline.timestamp() != known.deadline
            ):
                log.info("notice rescheduled", event_id=ev.event_id, deadline=ev.deadline.isoformat())
                task = self._tasks.pop(ev.event_id, None)
                if task is not None:
                    task.cancel()
                del self.ledger.episodes[ev.event_id]
            elif known.open and ev.deadline and ev.deadline.timestamp() < known.deadline - 1:
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
            self._write_request(ep, "requested")
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
                ep.phase = EpisodeState.REQUESTED
                self._write_request(ep, EpisodeState.REQUESTED)
                self.ledger.save()
            elif ep.phase == EpisodeState.REQUESTED:
                # resumed after a restart: the file names the agent that is gone, and trainers ignore
                # such requests; it is ours now (no second signal)
                self._update_request(ep, EpisodeState.REQUESTED)
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
        found = await self._rediscover()
        ep.problems.extend(found.problems)
        ep.channels["trainers"] = self._trainers_channel()
        if not ep.dry_run:
            # the file goes first: a handler that looks at it right after the signal finds it
            self._write_request(ep, EpisodeState.REQUESTED)
        deliveries = await asyncio.to_thread(
            lambda: [deliver(t, self.signum, self.procfs, ep.dry_run) for t in found.targets]
        )
        ep.deliveries = [_delivery_dict(d) for d in deliveries]
        if self.tcfg.http_url:
            if ep.dry_run:
                ep.channels["http"] = f"would POST to {self.tcfg.http_url}"
            else:
                payload = request_payload(
                    ep,
                    self.tcfg.signal,
                    ack_path(self.request_file.parent, ep.event_id),
                    EpisodeState.REQUESTED,
                    self.identity,
                )
                ep.channels["http"] = f"POST {self.tcfg.http_url}: " + await post_request(
                    self.tcfg.http_url, payload, self.tcfg.http_timeout
                )
        for d in deliveries:
            (log.info if d.outcome in (DeliveryOutcome.SIGNALLED, DeliveryOutcome.DRY_RUN) else log.warning)(
                "checkpoint signal" if not ep.dry_run else "dry-run: checkpoint signal",
                event_id=ep.event_id,
                target=d.target.describe(),
                source=d.target.source,
                signal=d.signal,
                outcome=d.outcome,
                detail=d.detail,
            )
        if ep.dry_run:
            ep.phase = EpisodeState.DRY_RUN
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
        ep.phase = EpisodeState.REQUESTED
        self.ledger.save()
        self.stats.requests["true" if ep.drill else "false"] += 1
        reached = tuple(f"{d.target.describe()}: {d.outcome}" for d in deliveries)
        # "unreachable" goes first: consumers treat it as an end of the episode (the classifier stops
        # holding verdicts), so it must not follow the "requested" that starts the hold
        unreachable = [d for d in deliveries if d.outcome in UNREACHABLE_OUTCOMES]
        if unreachable:
            self._publish(
                ep,
                CheckpointPhase.UNREACHABLE,
                targets=tuple(d.target.describe() for d in unreachable),
                detail="; ".join(d.line() for d in unreachable)
                + f"; not signalled, they must watch {self.request_file}",
            )
        if not deliveries:
            why = "; ".join(found.problems) or f"discover = {self.tcfg.discover} found no process"
            log.warning(
                "no checkpoint target found; only the request file was written", event_id=ep.event_id, why=why
            )
            self._publish(
                ep,
                CheckpointPhase.NO_TARGET,
                detail=f"no training process found ({why}); request file written",
            )
        else:
            self._publish(
                ep,
                CheckpointPhase.REQUESTED,
                targets=reached,
                detail=f"{self.tcfg.signal} and {self.request_file}",
            )

    def _trainers_channel(self) -> str:
        if self.trainers:
            return trainers_line(self.request_file, self.trainers).split(": ", 1)[1]
        how = (
            f"they find it through {self.discovery_file}"
            if self.discovery_file is not None
            else "no discovery record is published"
        )
        env = f"TNA_CHECKPOINT_REQUEST_FILE={self.request_file}"
        return f"NO trainer has found {self.request_file} ({how}, or {env})"

    def _write_request(self, ep: Episode, state: str) -> None:
        payload = request_payload(
            ep, self.tcfg.signal, ack_path(self.request_file.parent, ep.event_id), state, self.identity
        )
        try:
            prepare_dir(self.request_file.parent)
            write_request(self.request_file, payload)
            ep.channels["file"] = str(self.request_file)
        except OSError as e:
            ep.channels["file"] = f"error: {e.strerror or e}"
            log.error("cannot write the checkpoint request file", path=str(self.request_file), error=str(e))

    def _update_request(self, ep: Episode, state: str) -> None:
        """Mark the request file's state, if it still holds this episode's request."""
        try:
            current = json.loads(self.request_file.read_text())
        except (OSError, ValueError):
            return
        if isinstance(current, dict) and current.get("event_id") == ep.event_id:
            self._write_request(ep, state)

    async def _await_ack(self, ep: Episode) -> None:
        ack_file = ack_path(self.request_file.parent, ep.event_id)
        while True:
            ack = self._control_acks.pop(ep.event_id, None) or self._read_ack_file(ack_file, ep)
            if ack is not None:
                self._complete(ep, ack)
                return
            now = time.time()
            if ep.escalate_at is not None and not ep.escalated and now >= ep.escalate_at:
                await self._escalate(ep)
            if now >= ep.deadline:
                self._miss(ep)
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(ACK_POLL_SECONDS, max(0.01, ep.deadline - now)))

    def _read_ack_file(self, path: Path, ep: Episode) -> dict[str, Any] | None:
        try:
            ack = read_ack(path, ep.event_id)
        except ValueError as e:
            if ep.event_id not in self._bad_ack_logged:
                self._bad_ack_logged.add(ep.event_id)
                log.warning("ignoring an unusable ack file", event_id=ep.event_id, error=str(e))
            return None
        if ack is not None:
            with contextlib.suppress(OSError, ValueError):
                raw = json.loads(path.read_text())
                ack["at"] = _trainer_time(raw.get("at"), ep, ack["at"])
        return ack

    def _complete(self, ep: Episode, ack: dict[str, Any]) -> None:
        ep.ack = ack
        ep.finished_at = float(ack["at"])
        duration = ep.duration or 0.0
        drill = "true" if ep.drill else "false"
        if ep.finished_at > ep.deadline:
            ep.late_ack = True
            self._miss(ep)
            return
        ep.phase = EpisodeState.COMPLETED
        self.stats.completed[drill] += 1
        self.stats.observe(ep.drill, duration)
        self.ledger.save()
        self._update_request(ep, EpisodeState.COMPLETED)
        where = f" at {ack['path']}" if ack.get("path") else ""
        step = f"step {ack['step']}" if "step" in ack else "checkpoint"
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
            detail=f"{step}{where}, {ep.deadline - ep.finished_at:.0f} s before the deadline",
        )

    def _miss(self, ep: Episode) -> None:
        ep.phase = EpisodeState.MISSED
        ep.finished_at = ep.finished_at or time.time()
        self.stats.missed["true" if ep.drill else "false"] += 1
        self.ledger.save()
        self._update_request(ep, EpisodeState.MISSED)
        log.error("checkpoint deadline missed", event_id=ep.event_id, kind=ep.kind, late_ack=ep.late_ack)
        self._publish(
            ep,
            CheckpointPhase.MISSED,
            duration=ep.duration,
            detail="the ack came after the deadline" if ep.late_ack else "no ack before the deadline",
        )

    async def _escalate(self, ep: Episode) -> None:
        ep.escalated = True
        targets = [
            Target(d["pid"], d["start_time_ticks"], d["comm"], d["source"])
            for d in ep.deliveries
            if "start_time_ticks" in d
        ]
        results = await asyncio.to_thread(
            lambda: [
                deliver(t, signal.SIGTERM, self.procfs, ep.dry_run, check_handler=False) for t in targets
            ]
        )
        ep.channels["escalation"] = "; ".join(d.line() for d in results) or "no target left"
        self.ledger.save()
        log.warning(
            "final SIGTERM before the deadline", event_id=ep.event_id, results=ep.channels["escalation"]
        )
        self._publish(ep, CheckpointPhase.ESCALATED, detail=ep.channels["escalation"])

    def _cancel(self, event_id: str, why: str) -> None:
        ep = self.ledger.episodes.get(event_id)
        if ep is None or not ep.open:
            log.info("withdrawn notice had nothing pending", event_id=event_id)
            return
        task = self._tasks.pop(event_id, None)
        if task is not None:
            task.cancel()
        was_requested = ep.phase != EpisodeState.SCHEDULED
        ep.phase = EpisodeState.CANCELED
        ep.finished_at = time.time()
        ep.problems.append(why)
        self.ledger.save()
        if was_requested:
            self._update_request(ep, EpisodeState.CANCELED)
        log.info("checkpoint canceled", event_id=event_id, why=why, had_signalled=was_requested)
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
        return [
            ("POST", "/checkpoint/ack", self._control_ack),
            ("POST", "/checkpoint/drill", self._control_drill),
            ("GET", "/checkpoint/report", self._control_report),
        ]

    def _open_requested(self) -> list[Episode]:
        eps = [e for e in self.ledger.episodes.values() if e.phase == EpisodeState.REQUESTED]
        return sorted(eps, key=lambda e: e.requested_at or 0)

    async def _control_ack(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        event_id = body.get("event_id")
        if event_id is None:
            pending = self._open_requested()
            if not pending:
                return web.json_response({"error": "no checkpoint request is open"}, status=404)
            event_id = pending[-1].event_id
        ep = self.ledger.episodes.get(str(event_id))
        if ep is None:
            return web.json_response({"error": f"unknown event {event_id!r}"}, status=404)
        if ep.phase == EpisodeState.COMPLETED:
            return web.json_response({"error": "already acknowledged", "event_id": ep.event_id}, status=409)
        if ep.phase != EpisodeState.REQUESTED:
            return web.json_response(
                {"error": f"event {ep.event_id} is {ep.phase}; nothing to acknowledge"}, status=409
            )
        self._control_acks[ep.event_id] = clean_ack(body, via="control socket")
        self._wake.set()
        fut = self._done.get(ep.event_id)
        if fut is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(fut), 5)
        return web.json_response(
            {
                "ok": ep.phase == EpisodeState.COMPLETED,
                "event_id": ep.event_id,
                "phase": ep.phase,
                "duration_seconds": ep.duration,
                "before_deadline": ep.phase == EpisodeState.COMPLETED,
            }
        )

    async def _control_drill(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        kind = str(body.get("kind", NoticeKind.SPOT_TERMINATION))
        if not _KIND.match(kind):
            raise ValueError(f"kind must look like spot-termination or maintenance-reboot, got {kind!r}")
        deadline = float(body.get("deadline_seconds", 300))
        if not 1 <= deadline <= 86400:
            raise ValueError("deadline_seconds must be between 1 and 86400")
        wait = float(body.get("wait_seconds", deadline))
        now = datetime.now(UTC)
        event_id = f"drill-{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
        if body.get("dry_run"):
            self._force_dry.add(event_id)
        done = asyncio.get_running_loop().create_future()
        self._done[event_id] = done
        log.info("drill started", event_id=event_id, kind=kind, deadline_seconds=deadline)
        self.ctx.bus.publish(
            PreemptionEvent(
                provider="drill",
                kind=kind,
                event_id=event_id,
                deadline=now + timedelta(seconds=deadline),
                received_at=now,
                raw="synthetic notice from training-node-agent drill",
                drill=True,
            )
        )
        with contextlib.suppress(TimeoutError):
            # a little past the wait, so that a deadline at the same moment is recorded as missed
            await asyncio.wait_for(asyncio.shield(done), max(0.5, wait) + 1.0)
        self._force_dry.discard(event_id)
        ep = self.ledger.episodes.get(event_id)
        if ep is None:
            return web.json_response({"error": "the drill notice was not picked up"}, status=500)
        if ep.open:
            self._cancel(event_id, f"drill stopped waiting after {wait:.0f} s")
        return web.json_response(self.report(ep))

    async def _control_report(self, request: web.Request) -> web.Response:
        event_id = request.query.get("event_id")
        if event_id:
            ep = self.ledger.episodes.get(event_id)
        else:
            eps = sorted(self.ledger.episodes.values(), key=lambda e: e.requested_at or e.received_at)
            ep = eps[-1] if eps else None
        if ep is None:
            return web.json_response({"error": "no checkpoint episode yet"}, status=404)
        return web.json_response(self.report(ep))

    def report(self, ep: Episode) -> dict[str, Any]:
        provider = self.ctx.cfg.preemption.provider
        return build_report(ep, self.ctx.cfg.preemption.poll_interval + 0.1, provider)

    # --- faces -------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        now = time.time()
        targets = [
            {"pid": t.pid, "comm": t.comm, "source": t.source, "handler": self.handlers.get(t.pid, "unknown")}
            for t in self.found.targets
        ]
        eps = sorted(self.ledger.episodes.values(), key=lambda e: e.received_at)
        active = [_summary(e, now) for e in eps if e.open]
        recent = [_summary(e, now) for e in eps if not e.open][-5:]
        lines = [
            f"signal {self.tcfg.signal}, discover {', '.join(self.tcfg.discover)}"
            + ("  [DRY RUN: nothing is sent]" if self.tcfg.dry_run else "")
        ]
        if targets:
            for t in targets:
                ok = {"handler": "handler ready", "harmless": "signal is harmless"}.get(t["handler"])
                hint = ok or f"{t['handler'].upper()}: will get the request file only"
                lines.append(f"target pid {t['pid']} ({t['comm']}) via {t['source']}: {hint}")
        else:
            lines.append(
                "no training process found"
                + (f" ({'; '.join(self.found.problems)})" if self.found.problems else "")
            )
        lines.append(trainers_line(self.request_file, self.trainers))
        if self.discovery_file is not None:
            lines.append(f"trainers find it through {self.discovery_file} (or $TNA_CHECKPOINT_REQUEST_FILE)")
        else:
            lines.append(f"no discovery record: set TNA_CHECKPOINT_REQUEST_FILE={self.request_file}")
        lines += [f"notice {a['kind']} ({a['event_id']}): {a['line']}" for a in active]
        if recent:
            r = recent[-1]
            lines.append(f"last: {r['kind']}{' drill' if r['drill'] else ''} {r['line']}")
        return {
            "signal": self.tcfg.signal,
            "dry_run": self.tcfg.dry_run,
            "discover": list(self.tcfg.discover),
            "request_file": str(self.request_file),
            "discovery_file": None if self.discovery_file is None else str(self.discovery_file),
            "trainers": self.trainers,
            "targets": targets,
            "problems": list(self.found.problems),
            "active": active,
            "recent": recent,
            "lines": lines,
        }

    def metrics(self) -> Iterable[Metric]:
        s = self.stats
        for name, help_text, values in (
            ("requests", "Checkpoint requests sent to the training processes.", s.requests),
            ("completed", "Checkpoints acknowledged before the deadline.", s.completed),
            ("deadline_missed", "Checkpoint requests with no ack before the deadline.", s.missed),
        ):
            c = CounterMetricFamily(f"training_node_checkpoint_{name}", help_text, labels=["drill"])
            for drill, v in values.items():
                c.add_metric([drill], v)
            yield c
        h = HistogramMetricFamily(
            "training_node_checkpoint_duration_seconds",
            "Time from the checkpoint request to the trainer's ack.",
            labels=["drill"],
        )
        for drill in ("false", "true"):
            cum = 0
            buckets = []
            for le, n in zip((*DURATION_BUCKETS, float("inf")), s.buckets[drill], strict=True):
                cum += n
                buckets.append(("+Inf" if le == float("inf") else repr(le), cum))
            h.add_metric([drill], buckets, s.sums[drill])
        yield h
        yield GaugeMetricFamily(
            "training_node_checkpoint_targets",
            "Training processes found by [trainer] discover.",
            value=len(self.found.targets),
        )
        yield GaugeMetricFamily(
            "training_node_checkpoint_targets_unsignalable",
            "Targets the configured signal would kill (no handler) or that ignore it.",
            value=sum(1 for v in self.handlers.values() if v in ("no-handler", "ignored")),
        )
        yield GaugeMetricFamily(
            "training_node_checkpoint_in_progress",
            "Checkpoint requests waiting for their ack.",
            value=len(self._open_requested()),
        )


def _delivery_dict(d: Delivery) -> dict[str, Any]:
    return {
        "pid": d.target.pid,
        "start_time_ticks": d.target.start_time_ticks,
        "comm": d.target.comm,
        "source": d.target.source,
        "signal": d.signal,
        "outcome": d.outcome,
        "detail": d.detail,
    }


def _summary(ep: Episode, now: float) -> dict[str, Any]:
    if ep.phase == EpisodeState.SCHEDULED:
        line = f"acting in {ep.act_at - now:.0f} s, deadline in {ep.deadline - now:.0f} s"
    elif ep.phase in (EpisodeState.ACTING, EpisodeState.REQUESTED):
        ago = now - (ep.requested_at or now)
        line = f"requested {ago:.0f} s ago, waiting for the ack, {ep.deadline - now:.0f} s left"
    elif ep.phase == EpisodeState.COMPLETED:
        spare = ep.deadline - (ep.finished_at or now)
        line = f"completed in {ep.duration or 0:.1f} s, {spare:.0f} s before the deadline"
    else:
        line = ep.phase
    return {
        "event_id": ep.event_id,
        "kind": ep.kind,
        "provider": ep.provider,
        "phase": ep.phase,
        "drill": ep.drill,
        "deadline": _dt(ep.deadline).isoformat(),
        "duration_seconds": ep.duration,
        "targets": [f"pid {d['pid']} ({d['comm']}): {d['outcome']}" for d in ep.deliveries],
        "line": line,
    }


def _trainer_time(value: Any, ep: Episode, fallback: float) -> float:
    """The trainer's own ack time (same host clock) when it is plausible; the read time otherwise."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        lo = ep.requested_at or 0
        if lo <= value <= fallback:
            return float(value)
    return fallback


async def _json_body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    body = await request.json()
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ValueError("expected a JSON object")
    return body


async def _sleep_until(ts: float) -> None:
    while (left := ts - time.time()) > 0:
        await asyncio.sleep(min(left, MAX_SLEEP_SECONDS))
