"""The scheduler action: drain this node in the cluster's scheduler on a notice or a GPU fault,
requeue its jobs when the checkpoint episode ends, and lift the agent's own drain once the node is
healthy again. The scheduler is a backend (``backend.py``; Slurm in ``backends/slurm.py``): this
part knows only its neutral calls.

Two loops, so that the scheduler never slows anything else: ``_events`` only records what the bus
says (a cause appears or goes, an episode ended) and wakes ``_reconcile``, which reads the node from
the scheduler and does what ``policy.decide`` says. A failed or slow call is retried with the
agent's backoff; what is wanted stays wanted, so a drain that could not be set while the scheduler
was down is set when it answers again. The checkpoint action never waits on this part.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client.core import Metric

from agent.context import Context
from agent.core.backoff import Backoff
from agent.core.component import HasMetrics, HasRoutes, HasStatus, Route
from agent.core.events import (
    CheckpointEvent,
    CollectorFailingEvent,
    GpuFaultEvent,
    PreemptionEvent,
    SchedulerEvent,
)
from agent.core.vocabulary import (
    ActionOutcome,
    CheckpointPhase,
    GpuFault,
    OnReclaim,
    SchedulerAction,
    SchedulerKind,
    SchedulerProblem,
)
from agent.scheduler import backend, policy
from agent.scheduler import status as scheduler_status
from agent.scheduler.backend import NodeInfo, SchedulerBackend, SchedulerError
from agent.scheduler.control import routes
from agent.scheduler.policy import Cause, GateInputs, Step
from agent.snapshot import NodeSnapshot
from agent.sources.gpu.part import GpuPart

log = structlog.get_logger("scheduler")

# the episode ends after which the node is as good as gone: its jobs are requeued
RECLAIM_ENDS = frozenset(
    {
        CheckpointPhase.COMPLETED,
        CheckpointPhase.MISSED,
        CheckpointPhase.UNREACHABLE,
        CheckpointPhase.NO_TARGET,
    }
)
REQUEUE_GRACE = 60.0  # a requeue that failed is retried this long past the notice's deadline


@dataclass
class _Reclaim:
    event_id: str
    retry_until: float  # wall time
    dry: bool


class SchedulerComponent(HasMetrics, HasRoutes, HasStatus):
    name = "scheduler"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg.scheduler
        self.gpu_enabled = ctx.cfg.gpu.enabled
        self.backend: SchedulerBackend | None = None
        self.node_name: str | None = ctx.cfg.node_name or None
        self.node: NodeInfo | None = None
        self.error: str | None = None  # the last scheduler failure, until a call works again
        self.causes: dict[str, Cause] = {}
        self.reclaims: list[_Reclaim] = []
        self.would: dict[str, list[str]] = {}  # event id (or "dry-run") -> what would have been done
        self.actions: Counter[tuple[str, str]] = Counter()
        self.decision = policy.Decision(Step.NOTHING)
        # the health gate's inputs
        self.gpus_at_start: frozenset[int] | None = None
        self.gpus_up: frozenset[int] | None = None
        self.gpus_unresponsive: frozenset[int] = frozenset()
        self.last_xid_at: float | None = None
        self.failing: set[str] = set()
        self.gate_since: float | None = None
        self.quiet_since: float | None = None  # monotonic time the last cause went
        self.wake = asyncio.Event()
        self.changed = asyncio.Event()  # set after each reconcile (the drill's report waits on it)
        self._said: set[str] = set()
        self._backoff = Backoff(base=0.5, cap=self.cfg.retry_max)
        self._queue = ctx.bus.subscribe(
            "scheduler", (PreemptionEvent, CheckpointEvent, GpuFaultEvent, CollectorFailingEvent)
        )
        ctx.snapshot_listeners.append(self.on_snapshot)

    # --- lifecycle ---------------------------------------------------------------------------------

    async def run(self) -> None:
        await self._setup()
        events = asyncio.create_task(self._events(), name="scheduler-events")
        try:
            await self._reconcile_loop()
        finally:
            events.cancel()

    async def stop(self) -> None:
        pass

    async def _setup(self) -> None:
        if self.cfg.kind == SchedulerKind.AUTO:
            cls = await backend.detect(self.ctx.cfg)
            log.info("scheduler detected", kind=cls.kind if cls else SchedulerKind.NONE)
        else:
            cls = backend.backend_class(self.cfg.kind)
        if cls is None:
            return
        on = cls(self.ctx.cfg)
        if self.node_name is None:
            try:
                self.node_name = await on.own_name()
            except SchedulerError as e:
                self.error = f"no {cls.words[0]} node name: set [scheduler] node_name ({e})"
                log.error("scheduler off", why=self.error)
                return
        self.backend = on
        log.info("scheduler on", kind=cls.kind, node=self.node_name, dry_run=self.cfg.dry_run)

    # --- what the bus says -------------------------------------------------------------------------

    async def _events(self) -> None:
        while True:
            ev = await self._queue.get()
            self.on_event(ev)
            self.wake.set()

    def on_event(self, ev: object) -> None:
        now = time.time()  # expired causes go (a notice passed notice_expiry, an old Xid)
        self.causes = {k: c for k, c in self.causes.items() if c.expires_at is None or c.expires_at > now}
        if isinstance(ev, PreemptionEvent):
            cause = policy.notice_cause(ev, self.cfg)
            if cause is None:
                return
            if ev.drill:
                self._would(ev.event_id, f"would drain {self.node_name}: {cause.reason}")
            elif ev.withdrawn:
                self.causes.pop(cause.key, None)
                self.reclaims = [r for r in self.reclaims if r.event_id != ev.event_id]
            else:
                self.causes[cause.key] = cause
        elif isinstance(ev, CheckpointEvent):
            if ev.phase not in RECLAIM_ENDS:
                return
            if ev.drill or f"notice/{ev.event_id}" in self.causes:
                until = (ev.deadline.timestamp() if ev.deadline else time.time()) + REQUEUE_GRACE
                self.reclaims.append(_Reclaim(ev.event_id, until, ev.drill or self.cfg.dry_run))
        elif isinstance(ev, GpuFaultEvent):
            if ev.fault == GpuFault.XID:
                self.last_xid_at = time.monotonic()
            cause = policy.fault_cause(ev, self.cfg)
            if cause is not None and ev.cleared:
                self.causes.pop(cause.key, None)
            elif cause is not None:
                self.causes[cause.key] = cause
        elif isinstance(ev, CollectorFailingEvent):
            (self.failing.discard if ev.cleared else self.failing.add)(ev.collector)

    def on_snapshot(self, snap: NodeSnapshot) -> None:
        part = snap.part(GpuPart)
        if part is None:
            self.gpus_up = None
            return
        if self.gpus_at_start is None:
            self.gpus_at_start = frozenset(g.index for g in part.gpus)
        self.gpus_up = frozenset(g.index for g in part.gpus if g.up)
        self.gpus_unresponsive = frozenset(g.index for g in part.gpus if g.hung)

    # --- the health gate ---------------------------------------------------------------------------

    def gate_why(self) -> str | None:
        g = GateInputs(
            gpus_at_start=self.gpus_at_start or frozenset(),
            gpus_up=self.gpus_up if self.gpus_at_start is not None else None,
            gpus_unresponsive=self.gpus_unresponsive,
            last_xid_at=self.last_xid_at,
            failing_collectors=frozenset(self.failing),
            gpu_enabled=self.gpu_enabled,
        )
        why = policy.gate(g, time.monotonic(), self.cfg.resume_after)
        if why is None and self.gate_since is None:
            self.gate_since = time.monotonic()
        elif why is not None:
            self.gate_since = None
        return why

    def health(self) -> str | None:
        """None when the node is fit for jobs, else one line: the gate, or a cause standing."""
        why = self.gate_why()
        if why is not None:
            return why
        wanted = policy.standing(self.causes, time.time())
        return wanted[0].reason.removeprefix(policy.OWN_PREFIX).strip() if wanted else None

    # --- acting on the node ------------------------------------------------------------------------

    async def _reconcile_loop(self) -> None:
        while True:
            wait = self.cfg.poll_interval
            # cleared before acting, not after: a notice or fault that arrives while the scheduler is
            # slow (its controller away, a loaded node) wakes the next round at once, not a poll later
            self.wake.clear()
            if self.backend is None:
                self.reclaims.clear()  # no scheduler: nothing to requeue, nothing to keep
            elif self.node_name is not None:
                try:
                    await self.reconcile(self.backend, self.node_name)
                    self._backoff.reset()
                    if self.error is not None:
                        log.info("scheduler answers again", kind=self.backend.kind, node=self.node_name)
                        self._alert(SchedulerProblem.FAILING, self.error, cleared=True)
                    self.error = None
                except SchedulerError as e:
                    wait = min(wait, self._backoff.next())
                    if self.error is None:  # once per outage, not once per retry
                        log.error(
                            "scheduler action failed; retrying",
                            kind=self.backend.kind,
                            node=self.node_name,
                            error=str(e),
                        )
                        self._alert(SchedulerProblem.FAILING, str(e))
                    self.error = str(e)
            self.changed.set()
            self.changed = asyncio.Event()
            if self.backend is None:
                # nothing to poll: only an event has work for a round (a timer would wake the
                # loop every poll_interval on every node without a scheduler, for nothing)
                await self.wake.wait()
                continue
            try:
                async with asyncio.timeout(wait):
                    await self.wake.wait()
            except TimeoutError:
                pass

    async def reconcile(self, sched: SchedulerBackend, node: str) -> None:
        # the drain first: a job requeued off a node that still takes jobs could start there again
        wanted = policy.standing(self.causes, time.time())
        try:
            self.node = info = await sched.node(node)
        except SchedulerError:
            if wanted and not self.cfg.dry_run:  # a drain that is wanted and cannot be set yet
                self._count(SchedulerAction.DRAIN, ActionOutcome.FAILED, None)
            raise
        why = self.gate_why()
        now = time.monotonic()
        # the hold counts from when the node was last both healthy and without a cause: a notice
        # that is cancelled is followed by resume_after of health before the drain goes
        if wanted:
            self.quiet_since = None
        elif self.quiet_since is None:
            self.quiet_since = now
        since = max(self.gate_since or now, self.quiet_since or now)
        held = now - since if why is None else 0.0
        d = self.decision = policy.decide(info, wanted, why, held, self.cfg.resume_after)
        if d.step == Step.FOREIGN and wanted:
            self._once(f"foreign/{d.reason}", "node drained by someone else: left as it is", reason=d.reason)
            self._count(SchedulerAction.DRAIN, ActionOutcome.FOREIGN, f"foreign/{d.reason}")
        elif d.step == Step.DRAIN:
            await self._act(SchedulerAction.DRAIN, d.reason, sched.drain(node, d.reason), reason=d.reason)
        elif d.step == Step.RESUME:
            await self._act(SchedulerAction.RESUME, info.reason, sched.resume(node), reason=info.reason)
        await self._reclaims(sched, node)

    async def _reclaims(self, sched: SchedulerBackend, node: str) -> None:
        """Requeue (or cancel) the node's running jobs for each episode that ended."""
        while self.reclaims:
            r = self.reclaims[0]
            if time.time() > r.retry_until:
                log.error("jobs not requeued before the deadline passed", event_id=r.event_id)
                self.reclaims.pop(0)
                continue
            cancel = self.cfg.on_reclaim == OnReclaim.CANCEL
            action = SchedulerAction.CANCEL if cancel else SchedulerAction.REQUEUE
            try:
                jobs = await sched.jobs_on(node)
            except SchedulerError:
                self._count(action, ActionOutcome.FAILED, None)
                raise
            plan = policy.reclaim_plan(jobs, self.cfg.on_reclaim)
            for j in plan.refused:
                words = policy.job_words(j)
                log.warning("job is not requeueable: left alone; it ends with the node", job=words)
                self._would(r.event_id, f"left alone: {words} (not requeueable)")
                self._count(action, ActionOutcome.REFUSED, None)
            if plan.refused and not r.dry:
                named = tuple(policy.job_words(j) for j in plan.refused)
                self._alert(SchedulerProblem.NOT_REQUEUEABLE, "", jobs=named, event_id=r.event_id)
            ids = [j.job_id for j in plan.act]
            if ids:
                names = ", ".join(policy.job_words(j) for j in plan.act)
                if r.dry:
                    self._would(r.event_id, f"would {action} {names}")
                    log.info(f"dry run: would {action}", jobs=names, event_id=r.event_id)
                    self._count(action, ActionOutcome.DRY_RUN, None)
                else:
                    call = sched.cancel(ids) if action == SchedulerAction.CANCEL else sched.requeue(ids)
                    await self._act(action, names, call, jobs=names, event_id=r.event_id)
            elif not plan.refused:
                self._would(r.event_id, f"no running job on {node} to {action}")
            self.reclaims.pop(0)

    async def _act(self, action: SchedulerAction, what: str, call: Any, **fields: Any) -> None:
        """Make one change in the scheduler, or say it in a dry run; count it either way."""
        if self.cfg.dry_run:
            call.close()  # the coroutine is never awaited: nothing is sent
            self._once(f"dry/{action}/{what}", f"dry run: would {action} {self.node_name}", **fields)
            self._would("dry-run", f"would {action} {self.node_name}: {what}")
            self._count(action, ActionOutcome.DRY_RUN, f"dry/{action}/{what}")
            return
        try:
            await call
        except SchedulerError:
            self._count(action, ActionOutcome.FAILED, None)
            raise
        self._count(action, ActionOutcome.OK, None)
        log.info(f"scheduler {action}", node=self.node_name, **fields)

    def _count(self, action: SchedulerAction, outcome: ActionOutcome, once: str | None) -> None:
        if once is not None and f"count/{once}" in self._said:
            return
        if once is not None:
            self._said.add(f"count/{once}")
        self.actions[(action, outcome)] += 1

    def _alert(self, problem: SchedulerProblem, detail: str, **fields: Any) -> None:
        self.ctx.bus.publish(
            SchedulerEvent(
                problem=problem,
                node=self.node_name or "",
                scheduler=self.backend.kind if self.backend else "",
                scheduler_words=self.backend.words if self.backend else None,
                detail=detail,
                **fields,
            )
        )

    def _once(self, key: str, message: str, **fields: Any) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning(message, node=self.node_name, **fields)

    def _would(self, event_id: str, line: str) -> None:
        lines = self.would.setdefault(event_id, [])
        if line not in lines:
            lines.append(line)
        while len(self.would) > 20:  # bounded: the oldest drills go
            del self.would[next(iter(self.would))]

    # --- faces -------------------------------------------------------------------------------------

    @property
    def kind(self) -> str | None:
        return self.backend.kind if self.backend is not None else None

    @property
    def dry_run(self) -> bool:
        return self.cfg.dry_run

    def control_routes(self) -> list[Route]:
        return routes(self)

    def status(self) -> dict[str, Any]:
        return scheduler_status.status(self)

    def metrics(self) -> Iterable[Metric]:
        return scheduler_status.metrics(self)
