"""The preemption watcher component: polls the cloud's metadata service and publishes one
de-duplicated :class:`~agent.core.events.PreemptionEvent` per notice (and one when it is withdrawn).

Each source of the provider runs its own loop on a fixed cadence (``poll_interval`` with jitter for
spot notices, ``maintenance_interval`` for maintenance lists, GCP's long-poll when enabled). All
requests share one budget of ``max_requests_per_second``. A failing read backs off exponentially up to
``backoff_max`` (a few seconds: a spot notice leaves two minutes), is counted and shown in status, and
never withdraws a notice or stops the loop.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from dataclasses import replace
from typing import Any

import aiohttp
import structlog
from aiohttp import web
from prometheus_client.core import Metric

from agent.context import Context
from agent.core import backoff
from agent.core.component import HasMetrics, HasRoutes, HasStatus, Route
from agent.core.events import CheckpointEvent, InstanceIdentityEvent, PreemptionEvent, event_to_dict
from agent.core.vocabulary import Cadence, CheckpointPhase, Setting
from agent.preemption import faces, registry
from agent.preemption.client import MetadataClient, RateLimiter, RequestCounter
from agent.preemption.detect import detect
from agent.preemption.faces import SourceState, iso
from agent.preemption.notices import ActiveNotice, NoticeStore, NoticeTracker
from agent.preemption.provider import NoticeSource, Provider, Reading
from agent.preemption.wire import MetadataError

log = structlog.get_logger("preemption")

STATE_FILE = "preemption-notices.json"
MAX_BACKOFF_SECONDS = 10.0  # a spot notice leaves two minutes (GCE: 30 s): no failing source waits longer


class PreemptionWatcher(HasMetrics, HasRoutes, HasStatus):
    name = "preemption"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg.preemption
        if self.cfg.provider == Setting.AUTO:
            found = detect(ctx.cfg.agent.sysfs)
            self.provider_name, self.selected_by = found.provider, f"auto: {found.evidence}"
        else:
            self.provider_name, self.selected_by = self.cfg.provider, "config"
        cls = registry.provider_class(self.provider_name)
        self.provider_cls = cls
        self.endpoint = (self.cfg.endpoint_for(self.provider_name) or cls.base_url) if cls else None
        self.counter = RequestCounter()
        self.tracker = NoticeTracker(self.cfg.withdraw_after_polls)
        self.store = NoticeStore(ctx.state_dir / STATE_FILE)
        self.instance: InstanceIdentityEvent | None = None
        self.sources: dict[str, SourceState] = {}
        self.recent: deque[dict[str, Any]] = deque(maxlen=20)
        self.warnings: dict[str, dict[str, Any]] = {}
        self.announce_times: dict[str, float] = {}  # event_id -> monotonic time it was published
        self.acks: dict[str, str] = {}
        self.provider: Provider | None = None
        self.client: MetadataClient | None = None
        self._replay: list[tuple[str, PreemptionEvent, str]] = []
        if cls is not None:
            self._replay = self.store.load(self.provider_name)
            for source, ev, key in self._replay:
                self.tracker.restore(source, ev, key)
        wants_acks = cls is not None and cls.can_acknowledge and cls.acknowledges_after_checkpoint(self.cfg)
        self._ack_q = ctx.bus.subscribe("preemption-ack", (CheckpointEvent,)) if wants_acks else None

    # --- the loops ---------------------------------------------------------------------------------

    async def run(self) -> None:
        if self.provider_cls is None:
            log.info("preemption watcher off: no metadata request will be sent", reason=self.selected_by)
            return
        for source, ev, _ in self._replay:
            log.info("notice still active from before the restart", event_id=ev.event_id, kind=ev.kind)
            self._publish(replace(ev, replayed=True), source)
        self._replay = []
        connector = aiohttp.TCPConnector(limit=8, ttl_dns_cache=300)
        async with aiohttp.ClientSession(connector=connector) as session:
            self.client = MetadataClient(
                session,
                self.provider_name,
                self.endpoint or "",
                timeout=self.cfg.timeout,
                max_body=self.cfg.max_body_bytes,
                limiter=RateLimiter(self.cfg.max_requests_per_second),
                counter=self.counter,
                headers=self.provider_cls.headers,
                token=self.provider_cls.token,
                token_ttl=int(self.cfg.token_ttl),
                allow_tokenless=self.cfg.allow_tokenless_fallback,
            )
            self.provider = self.provider_cls(self.client, self.cfg)
            if self.cfg.backoff_max > MAX_BACKOFF_SECONDS:
                log.warning(
                    "backoff_max is longer than a spot notice allows; failing reads retry sooner",
                    backoff_max=self.cfg.backoff_max,
                    used=MAX_BACKOFF_SECONDS,
                )
            log.info(
                "watching for preemption notices",
                provider=self.provider_name,
                selected_by=self.selected_by,
                endpoint=self.endpoint,
            )
            tasks = [asyncio.create_task(self._run_source(src)) for src in self.provider.sources()]
            tasks.append(asyncio.create_task(self._run_identity()))
            if self._ack_q is not None:
                tasks.append(asyncio.create_task(self._run_acks()))
            try:
                await asyncio.gather(*tasks)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        if self.provider_cls is not None:
            self._save()

    def _interval(self, src: NoticeSource) -> float:
        return self.cfg.maintenance_interval if src.cadence == Cadence.SLOW else self.cfg.poll_interval

    def _backoff(self, errors: int) -> float:
        """The wait after ``errors`` failed reads in a row: poll_interval, doubling, never more than
        max(poll_interval, backoff_max). A failure means the state is unknown, so the slow sources too
        retry on this schedule: a notice present when the service returns is seen within that cap
        plus one round trip. The jitter only shortens the wait, so the cap holds."""
        cap = max(self.cfg.poll_interval, min(self.cfg.backoff_max, MAX_BACKOFF_SECONDS))
        return backoff.delay(errors, self.cfg.poll_interval, cap)

    async def _run_source(self, src: NoticeSource) -> None:
        st = self.sources.setdefault(
            src.name, SourceState(src.name, "long-poll" if src.long_poll else src.cadence)
        )
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        etag: str | None = None
        while True:
            delay = next_at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            started = loop.time()
            try:
                if src.long_poll is not None:
                    previous = etag
                    reading, etag = await src.long_poll(etag)
                else:
                    reading = await src.read()
            except MetadataError as e:
                outcome = e.outcome
                etag = None  # re-read plainly after a failure: no change may be missed
                self._failed(st, f"{outcome}: {e}")
                next_at = started + self._backoff(st.errors)  # a timeout has waited already
                continue
            except Exception as e:  # a bug in a parser must not end the watch
                log.exception("preemption source failed unexpectedly", source=src.name)
                etag = None
                self._failed(st, f"internal error: {type(e).__name__}: {e}")
                next_at = started + self._backoff(st.errors)  # a timeout has waited already
                continue
            self._succeeded(st)
            self._handle(src, reading)
            if src.long_poll is not None:
                # a long-poll that came back unchanged at once is a server ignoring wait_for_change:
                # fall back to the poll cadence rather than spin
                quick = loop.time() - started < self.cfg.poll_interval / 2
                next_at = loop.time() + (self.cfg.poll_interval if quick and etag == previous else 0)
            else:
                jitter = random.uniform(-self.cfg.jitter, self.cfg.jitter)
                next_at = max(loop.time(), started + self._interval(src) * (1 + jitter))

    def _failed(self, st: SourceState, message: str) -> None:
        st.errors += 1
        st.last_error = message[:500]
        st.last_error_at = time.time()
        level = log.warning if st.errors in (1, 10) or st.errors % 100 == 0 else log.debug
        level(
            "metadata read failed; retrying with backoff",
            provider=self.provider_name,
            source=st.name,
            error=st.last_error,
            consecutive=st.errors,
        )

    def _succeeded(self, st: SourceState) -> None:
        if st.errors:
            log.info("metadata reads recovered", provider=self.provider_name, source=st.name, after=st.errors)
        st.errors = 0
        st.reads += 1
        st.last_ok = time.time()

    def _handle(self, src: NoticeSource, reading: Reading) -> None:
        for text in reading.warnings:
            self._warn(src.name, text)
        out = self.tracker.observe(src.name, reading.notices, withdraw_after=1 if src.long_poll else None)
        for ev in out:
            self._publish(ev, src.name)
        if out:
            self._save()

    def _warn(self, source: str, text: str) -> None:
        w = self.warnings.get(text)
        if w is None:
            log.warning(
                "metadata answer only partly understood",
                provider=self.provider_name,
                source=source,
                problem=text,
            )
            if len(self.warnings) >= 20:
                self.warnings.pop(next(iter(self.warnings)))
            w = self.warnings[text] = {"source": source, "text": text, "count": 0, "first": iso(time.time())}
        w["count"] += 1
        w["last"] = iso(time.time())

    def _publish(self, ev: PreemptionEvent, source: str) -> None:
        self.announce_times[ev.event_id] = time.monotonic()
        if len(self.announce_times) > 1000:
            self.announce_times.pop(next(iter(self.announce_times)))
        self.ctx.bus.publish(ev)
        entry = {k: v for k, v in event_to_dict(ev).items() if k not in ("type", "raw")}
        self.recent.append({**entry, "source": source})
        fields = {
            "provider": ev.provider,
            "kind": ev.kind,
            "event_id": ev.event_id,
            "deadline": ev.deadline.isoformat() if ev.deadline else None,
            "seconds_remaining": None if ev.seconds_remaining is None else round(ev.seconds_remaining, 1),
            "source": source,
        }
        if ev.withdrawn:
            log.info("preemption notice withdrawn", **fields)
        elif ev.replayed:
            log.info("preemption notice restored after restart", **fields)
        else:
            log.warning("preemption notice", **fields)

    def _save(self) -> None:
        try:
            self.store.save(self.provider_name, self.tracker.active)
        except OSError as e:
            log.error("cannot save preemption notices", path=str(self.store.path), error=str(e))

    async def _run_identity(self) -> None:
        assert self.provider is not None
        errors = 0
        while True:
            try:
                ident = await self.provider.identity()
                break
            except Exception as e:  # MetadataError, or a bug: identity is nice to have, never fatal
                errors += 1
                if errors == 1:
                    log.warning("cannot read the instance identity yet", error=f"{type(e).__name__}: {e}")
                await asyncio.sleep(self._backoff(errors))
        self.instance = ident
        self.tracker.instance = ident.instance_id
        self.ctx.bus.publish(ident)
        log.info(
            "instance identity",
            provider=ident.provider,
            instance_id=ident.instance_id,
            instance_type=ident.instance_type,
            region=ident.region,
            zone=ident.zone,
        )

    # --- acknowledgement (clouds that take one: the provider's can_acknowledge) -----------------------

    async def _run_acks(self) -> None:
        assert self._ack_q is not None
        while True:
            ev = await self._ack_q.get()
            if isinstance(ev, CheckpointEvent) and ev.phase == CheckpointPhase.COMPLETED and not ev.drill:
                await self.ack(ev.event_id)

    async def ack(self, event_id: str) -> str:
        """Approve an active notice now, where the cloud takes an early approval; returns what
        happened, in words. Called after a confirmed checkpoint when the provider says so (its
        ``acknowledges_after_checkpoint``), or over the control socket."""
        notice = self.tracker.find(event_id)
        if self.provider is None or not self.provider.can_acknowledge:
            return f"not acknowledged: {self.provider_name} notices take no acknowledgement"
        if notice is None:
            return f"not acknowledged: no active notice {event_id}"
        if event_id in self.acks and self.acks[event_id].startswith("acknowledged"):
            return self.acks[event_id]
        try:
            await self.provider.acknowledge(event_id)
        except MetadataError as e:
            self.acks[event_id] = f"failed: {e}"
            log.error("acknowledgement failed", provider=self.provider_name, event_id=event_id, error=str(e))
        else:
            self.acks[event_id] = f"acknowledged at {iso(time.time())}"
            log.warning(
                "notice approved early",
                provider=self.provider_name,
                event_id=event_id,
                kind=notice.event.kind,
            )
        return self.acks[event_id]

    def control_routes(self) -> list[Route]:
        async def ack(request: web.Request) -> web.Response:
            body = await request.json()
            event_id = body.get("event_id") if isinstance(body, dict) else None
            if not isinstance(event_id, str) or not event_id:
                raise ValueError('expected {"event_id": "..."}')
            result = await self.ack(event_id)
            return web.json_response({"event_id": event_id, "result": result})

        acknowledges = self.provider_cls is not None and self.provider_cls.can_acknowledge
        return [("POST", "/preemption/ack", ack)] if acknowledges else []

    # --- faces (faces.py) --------------------------------------------------------------------------

    @property
    def kinds(self) -> tuple[str, ...] | None:
        return self.provider_cls.kinds if self.provider_cls is not None else None

    @property
    def token_state(self) -> str | None:
        return self.client.token_state if self.client else None

    def notices(self) -> list[ActiveNotice]:
        return list(self.tracker.active.values())

    def active_notices(self) -> list[dict[str, Any]]:
        return faces.active_notices(self)

    def status(self) -> dict[str, Any]:
        return faces.status(self)

    def metrics(self) -> list[Metric]:
        return faces.metrics(self)
