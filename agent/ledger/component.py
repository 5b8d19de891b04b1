"""The goodput ledger as a daemon part: books every snapshot's interval, follows the checkpoint
handshake, the trainer's periodic checkpoint reports and the cloud's notices, keeps the book in
``state_dir``, and shows it in status, in /metrics (``metrics.py``) and (opt-in) in a daily chat
digest.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from aiohttp import web
from prometheus_client.core import Metric

from agent.classifier.published import Published, unclassified
from agent.config.cost import hourly_price
from agent.context import Context
from agent.core.component import HasMetrics, HasRoutes, HasStatus, Route
from agent.core.events import (
    CheckpointEvent,
    Event,
    GoodputDigestEvent,
    InstanceIdentityEvent,
    PreemptionEvent,
)
from agent.core.vocabulary import CheckpointPhase, Market, NoticeKind, Setting
from agent.core.zones import zone
from agent.ledger import cadence, saved, store
from agent.ledger import jobs as by_jobs
from agent.ledger import metrics as ledger_metrics
from agent.ledger.assign import BUCKETS, NO_JOB, gpu_time
from agent.ledger.book import Book
from agent.ledger.cadence import Advice
from agent.ledger.reads import job_keys, readings, told
from agent.ledger.summary import lines, summarize
from agent.snapshot import NodeSnapshot
from agent.sources.jobs.part import JobIdentity
from agent.sources.processes.part import ProcessPart

log = structlog.get_logger("ledger")

# the classifier's published results as they stand (its part's ``published``), handed in by the daemon
ClassifierView = Callable[[], Published]
RECLAIM_KINDS = (NoticeKind.MAINTENANCE_TERMINATE, NoticeKind.MAINTENANCE_STOP)
DUE = Event()  # put on the ledger's own queue when its periodic work is due (``_due``)


def next_digest(now: float, at: str, timezone: str) -> float:
    """The next ``HH:MM`` in ``timezone`` strictly after ``now`` (unix seconds)."""
    tz = zone(timezone)
    hh, mm = (int(x) for x in at.split(":"))
    due = datetime.fromtimestamp(now, tz).replace(hour=hh, minute=mm, second=0, microsecond=0)
    if due.timestamp() <= now:
        due = (due + timedelta(days=1)).replace(hour=hh, minute=mm)
    return due.timestamp()


class LedgerComponent(HasMetrics, HasRoutes, HasStatus):
    name = "goodput"

    def __init__(self, ctx: Context, classifier: ClassifierView | None = None) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg.goodput
        self.cost_cfg = ctx.cfg.cost
        self.ccfg = ctx.cfg.classifier
        self.classifier = classifier
        self.state_dir = ctx.state_dir
        self.request_dir = ctx.cfg.trainer.request_path(ctx.runtime_dir).parent
        book = Book(self.cfg.resolution, self.cfg.settle, self.cfg.keep)
        self.ledger = store.load(ctx.state_dir, book)
        self.identity: InstanceIdentityEvent | None = None
        self._events = ctx.bus.subscribe("goodput", (CheckpointEvent, PreemptionEvent, InstanceIdentityEvent))
        self._prev: float | None = None  # monotonic time of the previous snapshot
        self._unclassified = unclassified(self.ccfg)  # no classifier: nothing learned, no pressures
        self._due_at = 0.0  # monotonic time the periodic work is next due
        self._kept: set[str] = set()
        self._dir_mtime: int | None = None
        self._notices: set[str] = set()
        self._saved_at = time.monotonic()
        self._digest_due = self._next_digest(time.time())
        self.bad_reports = 0
        self._jobs_seen: tuple[JobIdentity, ...] = ()
        ctx.snapshot_listeners.append(self.on_snapshot)

    # --- input -------------------------------------------------------------------------------------

    @property
    def market(self) -> str:
        m = self.cost_cfg.market
        if m != Setting.AUTO:
            return m
        if self.identity is not None and self.identity.market:
            return self.identity.market
        return Market.SPOT if self.ledger.spot_seen else Market.ON_DEMAND

    @property
    def instance_type(self) -> str | None:
        return self.cost_cfg.instance_type or (self.identity.instance_type if self.identity else None)

    def prices(self) -> tuple[float | None, float | None]:
        if not self.cost_cfg.enabled:
            return None, None
        return hourly_price(self.cost_cfg, self.instance_type, self.market)

    @property
    def priced(self) -> bool:
        """A price is known (or was: money already booked stays shown). No price, no cost series."""
        return (
            self.prices()[0] is not None or any(self.ledger.book.cost) or any(self.ledger.book.unsettled()[1])
        )

    def on_snapshot(self, snap: NodeSnapshot) -> None:
        self._due(snap.monotonic)
        prev, self._prev = self._prev, snap.monotonic
        if prev is None or snap.monotonic <= prev:
            return  # the first snapshot after a start only sets the clock: nothing is booked twice
        gpus = readings(snap)
        view = self.classifier() if self.classifier else self._unclassified
        states = [gpu_time(g, view) for g in gpus]
        procs = snap.part(ProcessPart)
        job = bool(procs and procs.processes)
        hourly, on_demand = self.prices()
        n = len(gpus) or self.ledger.gpus
        gpu_price = hourly / 3600.0 / n if hourly and n else None
        seconds = snap.monotonic - prev
        keys, jobs = job_keys(snap)
        if jobs != self._jobs_seen:
            self._jobs_seen = jobs
            self.ledger.name_jobs([j.as_dict() for j in jobs])
        self.ledger.tick(
            snap.timestamp, seconds, gpus, states, job, view.pressures, gpu_price, keys, told(snap)
        )
        if hourly and on_demand and self.market == Market.SPOT and gpus:
            self.ledger.saving += max(0.0, on_demand - hourly) * seconds / 3600.0

    def handle(self, ev: object) -> None:
        if isinstance(ev, InstanceIdentityEvent):
            self.identity = ev
        elif isinstance(ev, PreemptionEvent):
            if ev.withdrawn or ev.drill or ev.replayed or ev.event_id in self._notices:
                return
            self._notices.add(ev.event_id)
            if ev.is_spot:
                self.ledger.spot_seen = True
            if ev.is_spot or ev.kind in RECLAIM_KINDS:
                self.ledger.interruption()
        elif isinstance(ev, CheckpointEvent):
            r = self.ledger.checkpoint(
                ev.phase,
                ev.event_id,
                ev.at.timestamp(),
                ev.drill,
                ev.duration_seconds,
                ev.deadline.timestamp() if ev.deadline else None,
            )
            if r is not None:
                log.info(
                    "reclaim booked" if not r.drill else "drill: what a reclaim would lose",
                    event_id=r.event_id,
                    outcome=r.outcome,
                    lost_seconds=round(r.lost_seconds, 1),
                    since_durable_seconds=None if r.since_durable is None else round(r.since_durable, 1),
                )

    def book_reports(self, reports: Iterable[saved.Saved]) -> None:
        """Periodic checkpoint reports, read off the loop (``saved.collect``), booked on it: the
        ledger changes with every tick there."""
        for report in reports:
            moved = self.ledger.saved(report)
            log.info(
                "periodic checkpoint reported",
                step=report.step,
                path=report.path,
                seconds=report.seconds,
                booked_as_checkpoint_gpu_seconds=round(moved, 1),
            )

    def _reports_may_have_come(self) -> bool:
        """A report is a new file in the request folder, which moves the folder's mtime: while that
        stands still there is nothing to read (one stat on the loop instead of a thread hop and a
        listing every poll). A folder changed under a second ago is read again, in case a file came
        in the same clock tick as the last look."""
        try:
            mtime = os.stat(self.request_dir).st_mtime_ns
        except OSError:
            gone, self._dir_mtime = self._dir_mtime is not None, None
            return gone  # gone since the last look: one more (empty) read
        fresh = mtime != self._dir_mtime or time.time_ns() - mtime < 1_000_000_000
        self._dir_mtime = mtime
        return fresh

    def _due(self, now: float) -> None:
        """Wake ``run`` for the periodic work (reports, saving, the digest) every ``poll``, from the
        snapshot listener: the loop is awake for the tick anyway, where a timer of its own would
        wake it once more every ``poll`` (a wake costs more than the work it finds)."""
        if now < self._due_at:
            return
        self._due_at = now + self.cfg.poll
        if self._events.empty():  # else run() is woken by what waits there, and does it after that
            self._events.put_nowait(DUE)

    async def run(self) -> None:
        while True:
            ev = await self._events.get()
            while True:
                if ev is not DUE:
                    self.handle(ev)
                if self._events.empty():
                    break
                ev = self._events.get_nowait()
            if self._reports_may_have_come():
                found = await asyncio.to_thread(saved.collect, self.request_dir, time.time(), self._kept)
                self.book_reports(found)
            now = time.time()
            if time.monotonic() - self._saved_at >= self.cfg.save_every:
                await self._save()
            if self.cfg.digest and now >= self._digest_due:
                self._digest_due = self._next_digest(now)
                self.publish_digest(now)

    async def _save(self) -> None:
        self._saved_at = time.monotonic()
        try:
            await asyncio.to_thread(store.write, self.state_dir, store.to_text(self.ledger))
        except OSError as e:
            log.warning("cannot save the goodput ledger", dir=str(self.state_dir), error=e.strerror)

    async def stop(self) -> None:
        await self._save()

    # --- the digest --------------------------------------------------------------------------------

    def _next_digest(self, now: float) -> float:
        return next_digest(now, self.cfg.digest_at, self.ctx.cfg.alerts.timezone)

    def publish_digest(self, now: float, since: float = 86400.0) -> GoodputDigestEvent:
        s = self.summary(now, since)
        ev = GoodputDigestEvent(
            since=datetime.fromisoformat(s["since"]),
            until=datetime.fromtimestamp(now, UTC),
            ratio=s["ratio"],
            gpu_seconds=s["gpu_seconds"],
            buckets=dict(s["buckets"]),
            currency=s["cost"]["currency"] if s["cost"] else None,
            cost=s["cost"]["total"] if s["cost"] else None,
            wasted=s["cost"]["wasted"] if s["cost"] else None,
            top_waste=s["top_waste"],
            remedy=s["remedy"],
            cadence=tuple(s["cadence_lines"]),
        )
        self.ctx.bus.publish(ev)
        return ev

    # --- faces -------------------------------------------------------------------------------------

    @property
    def currency(self) -> str:
        return self.cost_cfg.currency

    def advice(self, now: float) -> Advice | None:
        return self.ledger.advice(now, self.cfg.mtbi, self.cfg.sparse_factor)

    def goodput_ratio(self, now: float) -> float | None:
        ratio: float | None = self.summary(now, self.cfg.window)["ratio"]
        return ratio

    def summary(self, now: float, window: float) -> dict[str, Any]:
        seconds, cost, first = self.ledger.book.since(now - window)
        since = max(now - window, first) if first != float("inf") else now
        extra = None
        priced = self.priced
        if priced:
            hourly, on_demand = self.prices()
            extra = {
                "instance_hour_price": hourly,
                "on_demand_price": on_demand,
                "market": self.market,
                "instance_type": self.instance_type,
                "spot_saving": round(self.ledger.saving, 4),
            }
        s = summarize(seconds, cost if priced else None, since, now, self.cost_cfg.currency, extra)
        s["jobs"] = by_jobs.by_job(
            self.ledger.book.jobs_since(now - window),
            self.ledger.job_names,
            self.cost_cfg.currency if priced else None,
        )
        advice = self.advice(now)
        cost_known, _ = self.ledger.checkpoint_cost()
        why = "no checkpoint time measured yet" if cost_known is None else "no interruption rate known yet"
        s["cadence"] = advice.as_dict() if advice else None
        s["cadence_lines"] = cadence.lines(advice, why)
        return s

    def job_losses(self) -> dict[str, float]:
        """GPU-seconds of work each job would lose to a reclaim now (since its last durable
        checkpoint): the alerts' view of the ledger, handed to them by the daemon (``build.py``)."""
        if not self.ledger.job:
            return {}
        lose = self.ledger.would_lose_by_job(time.time())
        return {k: v for k, v in lose.items() if k != NO_JOB and v > 0}

    def reclaim_line(self, now: float) -> str | None:
        if not self.ledger.reclaims:
            if self.ledger.job:
                lose = self.ledger.would_lose(now) / max(1, self.ledger.gpus)
                return f"a reclaim now would lose {cadence.human(lose)} of work (since the last checkpoint)"
            return None
        r = self.ledger.reclaims[-1]
        what = "drill" if r.drill else "reclaim"
        if r.outcome == CheckpointPhase.COMPLETED:
            return f"last {what}: final checkpoint acknowledged, nothing lost"
        verb = "would lose" if r.drill else "lost"
        lost = cadence.human(r.lost_seconds)
        return f"last {what}: final checkpoint missed, {verb} {lost} of work on {r.gpus} GPU(s)"

    def status(self, window: float | None = None) -> dict[str, Any]:
        now = time.time()
        s = self.summary(now, window or self.cfg.window)
        led = self.ledger
        everything, _ = led.book.everything()
        s["lines"] = [
            *lines(s, s["cadence_lines"], self.reclaim_line(now)),
            *by_jobs.loss_lines(self.job_losses(), led.job_names),
        ]
        s.update(
            {
                "totals": {str(b): round(v, 3) for b, v in zip(BUCKETS, everything, strict=True)},
                "observed_seconds": round(led.observed, 3),
                "gpus": led.gpus,
                "job": led.job,
                "startup": led.startup,
                "market": self.market,
                "instance_type": self.instance_type,
                "last_durable": None
                if led.last_durable is None
                else datetime.fromtimestamp(led.last_durable).astimezone().isoformat(),
                "last_step": led.last_step,
                "would_lose_seconds": round(led.would_lose(now) / max(1, led.gpus), 3) if led.job else 0.0,
                "would_lose_gpu_seconds_by_job": {
                    k: round(v, 3) for k, v in led.would_lose_by_job(now).items() if k != NO_JOB
                }
                if led.job
                else {},
                "interruptions": led.interruptions,
                "reclaims": [r.as_dict() for r in led.reclaims],
                "unmovable_gpu_seconds": round(led.book.unmovable, 3),
                "request_dir": str(self.request_dir),
            }
        )
        return s

    def metrics(self) -> Iterable[Metric]:
        return ledger_metrics.families(self, time.time())

    def control_routes(self) -> list[Route]:
        return [("GET", "/goodput", self._get), ("POST", "/goodput/digest", self._digest)]

    async def _get(self, request: web.Request) -> web.Response:
        since = request.query.get("since")
        window = float(since) if since else None
        if window is not None and not 0 < window <= self.cfg.keep:
            raise ValueError(f"since must be between 0 and {self.cfg.keep:.0f} seconds")
        return web.json_response(self.status(window))

    async def _digest(self, _: web.Request) -> web.Response:
        ev = self.publish_digest(time.time())
        return web.json_response({"ok": True, "ratio": ev.ratio, "gpu_seconds": ev.gpu_seconds})
