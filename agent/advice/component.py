"""The advice as a daemon part: follows each job's GPU figures from the snapshots, reads its buckets
from the ledger, recognises the node, and answers which instance to rent next time: in status (one
line), on the control socket (``GET /advice?job=``, what ``advise`` prints), on /api/v1/advice (the
daemon hands it there) and, when a job ends, in the ledger's record of that job."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import structlog
from aiohttp import web

from agent.advice import words
from agent.advice.catalog import Catalog, merged, shipped
from agent.advice.estimate import JobFigures, ThisNode, rank
from agent.advice.figures import GpuFigures, add_snapshot
from agent.advice.recognise import recognise
from agent.context import Context
from agent.core.component import HasRoutes, HasStatus, Route
from agent.core.events import JobAdviceEvent
from agent.ledger.assign import BUCKETS, NO_JOB
from agent.ledger.component import LedgerComponent
from agent.ledger.reads import job_keys
from agent.snapshot import NodeSnapshot
from agent.sources.gpu.part import GpuPart
from agent.sources.host.part import HostPart
from agent.sources.jobs.part import JobPart

log = structlog.get_logger("advice")
# seconds an answer is reused: status and top ask every second, and the whole run's buckets cost the
# ledger a pass over its slots (45 ms for 8 days of 1-minute slots on a slow box): over a day of
# slots the status's answer is kept longer
FRESH = 5.0
STATUS_FRESH = 30.0
MANY_SLOTS = 1440
KEEP_ENDED = 20  # figures of ended jobs kept for `advise --job`


class AdviceComponent(HasRoutes, HasStatus):
    name = "advice"

    def __init__(self, ctx: Context, ledger: LedgerComponent) -> None:
        self.cfg = ctx.cfg.advice
        self.bus = ctx.bus
        self.keep = ctx.cfg.goodput.keep
        self.ledger = ledger
        self.catalog: Catalog = merged(shipped(), self.cfg.cards, self.cfg.instances)
        self.figures: dict[str, GpuFigures] = {}
        self.vcpus = os.cpu_count() or 1
        self.memory_bytes: int | None = None
        self._running: set[str] = set()
        self._ended: asyncio.Queue[str] = asyncio.Queue()
        self._cache: dict[tuple[str | None, float | None], tuple[float, dict[str, Any]]] = {}
        ctx.snapshot_listeners.append(self.on_snapshot)

    def on_snapshot(self, snap: NodeSnapshot) -> None:
        host = snap.part(HostPart)
        if host is not None:
            self.vcpus, self.memory_bytes = host.cpu_count, host.memory_total_bytes
        gpu = snap.part(GpuPart)
        if gpu is None:
            return
        keys, _ = job_keys(snap)
        add_snapshot(self.figures, gpu.gpus, keys, NO_JOB)
        if snap.part(JobPart) is None:
            return  # no word from the jobs source this tick: no job is taken to have ended
        running = {k for k in keys if k != NO_JOB}
        for gone in self._running - running:
            self._ended.put_nowait(gone)
        self._running = running

    async def run(self) -> None:
        while True:
            job = await self._ended.get()
            try:
                a = self.advise(job, time.time(), cached=False)
            except Exception:  # the advice of one ended job must not stop the next one's
                log.exception("cannot advise on an ended job", job=job)
                continue
            self.ledger.ledger.job_advice(job, {k: a[k] for k in ("binds", "lines", "made_at")})
            log.info("advice for an ended job", job=job, binds=a["binds"], lines=a["lines"])
            self.bus.publish(JobAdviceEvent(job, a["binds"], tuple(a["lines"])))
            ended = [k for k in self.figures if k != NO_JOB and k not in self._running]
            for old in ended[:-KEEP_ENDED]:
                del self.figures[old]

    async def stop(self) -> None:
        return None

    # --- the answer ---------------------------------------------------------------------------------

    def node(self) -> tuple[ThisNode | None, list[str]]:
        names: list[str] = []
        for f in self.figures.values():
            if len(f.names) > len(names):
                names = f.names
        identity = self.ledger.identity
        cloud = identity.provider if identity else None
        return recognise(self.catalog, self.ledger.instance_type, cloud, names, self.vcpus, self.memory_bytes)

    def job_figures(self, job: str | None, now: float, since: float | None) -> tuple[str | None, JobFigures]:
        """The job's buckets over ``since`` seconds (default: all the ledger keeps; the busiest job
        when none is named, the node's own when no scheduler job ran) and its GPU figures."""
        jobs = self.ledger.ledger.book.jobs_since(now - (since or self.keep))
        if job is None:
            named = [(sum(s), k) for k, (s, _) in jobs.items() if k != NO_JOB and sum(s) > 0]
            job = max(named)[1] if named else None
        seconds, _ = jobs.get(job if job is not None else NO_JOB, ([0.0] * len(BUCKETS), []))
        buckets = {str(b): s for b, s in zip(BUCKETS, seconds, strict=True)}
        f = self.figures.get(job if job is not None else NO_JOB) or GpuFigures()
        gpus = len(f.gpus) or self.ledger.ledger.gpus or 1
        return job, JobFigures(buckets, gpus, f.tensor, f.dram, f.memory_peak_bytes)

    def advise(
        self,
        job: str | None,
        now: float,
        cached: bool = True,
        since: float | None = None,
        fresh: float = FRESH,
    ) -> dict[str, Any]:
        hit = self._cache.get((job, since))
        if cached and hit is not None and now - hit[0] < fresh:
            return hit[1]
        key, figures = self.job_figures(job, now, since)
        here, notes = self.node()
        ranking = None
        if here is not None:
            price_here = self.ledger.prices()[0] or self.cfg.prices.get(here.id)
            clouds = self.cfg.clouds or ((here.cloud,) if here.cloud else ())
            ranking = rank(
                figures, here, self.catalog, self.cfg.headroom, self.cfg.prices, clouds, price_here
            )
        out = words.advice(key, figures, here, ranking, self.catalog, notes, now)
        self._cache[(job, since)] = (now, out)
        return out

    # --- faces --------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        many = len(self.ledger.ledger.book.slots) > MANY_SLOTS
        a = self.advise(None, time.time(), fresh=STATUS_FRESH if many else FRESH)
        return {"advice": a, "lines": [words.status_line(a)]}

    def control_routes(self) -> list[Route]:
        return [("GET", "/advice", self._get)]

    async def _get(self, request: web.Request) -> web.Response:
        job = request.query.get("job") or None
        since = float(request.query["since"]) if request.query.get("since") else None
        if since is not None and not 0 < since <= self.keep:
            raise ValueError(f"since must be between 0 and {self.keep:.0f} seconds")
        return web.json_response(self.advise(job, time.time(), since=since))
