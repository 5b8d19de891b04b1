"""The read-only TCP face: /metrics, /healthz, /api/v1/status and a landing page.

Nothing here changes state; that is the control socket's job. The web config's rules (basic auth,
rate limit, extra headers) are applied by a middleware from whatever :class:`Access` is current, so
a reload swaps them between two requests.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, generate_latest

from agent.core.tokens import TokenBucket
from agent.exporter.auth import AuthDecision, AuthOutcome, BasicAuth
from agent.exporter.guard import ConnectionTable
from agent.exporter.text import render_text

LANDING = """<!doctype html><html><head><title>training-node-agent</title></head><body>
<h1>training-node-agent {version}</h1>
<p>Health agent for GPU training nodes.</p>
<ul>
<li><a href="/metrics">/metrics</a> Prometheus exposition (OpenMetrics when asked, gzip when accepted)</li>
<li><a href="/healthz">/healthz</a> 200 while sampling progresses ("degraded" with the reason where GPUs are
missing), 503 with the reason otherwise</li>
{status_item}</ul></body></html>
"""
STATUS_ITEM = (
    '<li><a href="/api/v1/status">/api/v1/status</a> verdict, notices, collectors and the snapshot '
    "(the network view; the control socket has the full one)</li>\n"
    '<li><a href="/api/v1/advice">/api/v1/advice</a> which instance to rent next time, from what the job '
    "did (<code>?job=ID</code> for one job)</li>\n"
)
REPORT_ITEM = (
    '<li><a href="/report">/report</a> where the GPU time and money went, as a page (<code>?since=</code>'
    " seconds, <code>&amp;job=</code> a job id)</li>\n"
)
# the report page over ``since`` seconds (None: a day) for a job (None: the node); ValueError: bad query
ReportPage = Callable[[float | None, str | None], Awaitable[str]]
REALM = 'Basic realm="training-node-agent", charset="UTF-8"'
GZIP_LEVEL = 6  # Go's default, what node_exporter's promhttp uses


@dataclass(frozen=True)
class Access:
    """The request-level rules of one web config."""

    auth: BasicAuth | None = None
    limiter: TokenBucket | None = None
    headers: dict[str, str] = field(default_factory=dict)
    excluded: frozenset[str] = frozenset()


Unauthorized = Callable[[web.Request, AuthDecision], None]
Advise = Callable[[str | None], dict[str, Any] | None]  # a job (None: the busiest) -> its advice, None: off


def accepts_gzip(header: str) -> bool:
    """``Accept-Encoding`` names gzip (or ``*``) with a non-zero q-value."""
    for part in header.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() not in ("gzip", "x-gzip", "*"):
            continue
        q = params.strip().lower()
        if q.startswith("q="):
            try:
                return float(q[2:]) > 0
            except ValueError:
                return False
        return True
    return False


class Exposition:
    """Renders the registry, one render per event-loop pass for all requests that wait on it: a
    burst of concurrent scrapes costs one render, and nobody gets a body older than its request."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._pending: dict[tuple[str, bool], asyncio.Future[bytes]] = {}
        self.renders = 0
        self.served: dict[str, list[int]] = {"gzip": [0, 0], "identity": [0, 0]}  # [responses, bytes]

    def _text(self) -> bytes:
        text = getattr(self.registry, "text", None)  # agent.exporter.Registry: the snapshot's text is kept
        return text() if text is not None else render_text(self.registry.collect())

    async def body(self, accept: str, compressed: bool) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        key = (content_type, compressed)
        fut = self._pending.get(key)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._pending[key] = fut
            try:
                await asyncio.sleep(0)  # requests already read in this pass join this render
                # the text format the way generate_latest writes it, at a fraction of its cost
                raw = encoder(self.registry) if encoder is not generate_latest else self._text()
                self.renders += 1
                fut.set_result(gzip.compress(raw, GZIP_LEVEL) if compressed else raw)
            except BaseException as e:
                fut.set_exception(e)
                fut.exception()  # retrieved: the joiners get it, no "never retrieved" warning
                raise
            finally:
                del self._pending[key]
        body = await asyncio.shield(fut)
        count = self.served["gzip" if compressed else "identity"]
        count[0] += 1
        count[1] += len(body)
        return body, content_type


EXPOSITION = web.AppKey("exposition", Exposition)


def make_app(
    registry: CollectorRegistry,
    health: Callable[[], str | None],
    status: Callable[[], dict[str, Any]] | None,
    version: str,
    access: Callable[[], Access] = Access,
    table: ConnectionTable | None = None,
    on_unauthorized: Unauthorized | None = None,
    client_max_size: int = 64 * 1024,
    degraded: Callable[[], str | None] = lambda: None,
    report: ReportPage | None = None,
    advice: Advise | None = None,
) -> web.Application:
    exposition = Exposition(registry)

    async def metrics(request: web.Request) -> web.Response:
        compressed = accepts_gzip(request.headers.get("Accept-Encoding", ""))
        body, content_type = await exposition.body(request.headers.get("Accept", ""), compressed)
        headers = {"Content-Type": content_type, "Vary": "Accept-Encoding"}
        if compressed:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    async def healthz(_: web.Request) -> web.Response:
        reason = health()
        if reason is not None:
            return web.json_response({"status": "stalled", "reason": reason}, status=503)
        # still 200: the agent works and restarting it would not bring the GPU back (a liveness
        # probe that killed it on a wedged GPU would leave the node unwatched)
        worse = degraded()
        if worse is not None:
            return web.json_response({"status": "degraded", "reason": worse})
        return web.json_response({"status": "ok"})

    async def api_status(_: web.Request) -> web.Response:
        assert status is not None
        return web.json_response(status(), dumps=_dumps)

    async def report_page(request: web.Request) -> web.Response:
        assert report is not None
        try:
            since = request.query.get("since")
            html = await report(float(since) if since else None, request.query.get("job") or None)
        except ValueError as e:
            return web.Response(status=400, text=f"{e}\n")
        return web.Response(text=html, content_type="text/html")

    async def api_advice(request: web.Request) -> web.Response:
        assert advice is not None
        body = advice(request.query.get("job") or None)
        if body is None:
            return web.json_response({"error": "advice is off ([advice] enabled = false)"}, status=404)
        return web.json_response(body, dumps=_dumps)

    async def landing(_: web.Request) -> web.Response:
        items = (STATUS_ITEM if status else "") + (REPORT_ITEM if report else "")
        page = LANDING.format(version=version, status_item=items)
        return web.Response(text=page, content_type="text/html")

    @web.middleware
    async def connection_bounds(request: web.Request, handler: Any) -> web.StreamResponse:
        if table is None:
            return await handler(request)
        table.request_started(request.transport)
        success = False
        try:
            resp = await handler(request)
            success = resp.status < 400
            return resp
        finally:
            table.request_finished(request.transport, success)

    @web.middleware
    async def web_config_rules(request: web.Request, handler: Any) -> web.StreamResponse:
        rules = access()
        try:
            resp = await _apply(rules, request, handler, on_unauthorized)
        except web.HTTPException as e:  # the router's 404/405 get the configured headers too
            e.headers.update(rules.headers)
            raise
        resp.headers.update(rules.headers)
        return resp

    app = web.Application(middlewares=[connection_bounds, web_config_rules], client_max_size=client_max_size)
    app[EXPOSITION] = exposition
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    if status is not None:
        app.router.add_get("/api/v1/status", api_status)
        if advice is not None:  # served where the status is, behind the same rules
            app.router.add_get("/api/v1/advice", api_advice)
    if report is not None:
        app.router.add_get("/report", report_page)
    app.router.add_get("/", landing)
    return app


async def _apply(
    rules: Access, request: web.Request, handler: Any, on_unauthorized: Unauthorized | None
) -> web.StreamResponse:
    if rules.limiter is not None and not rules.limiter.try_take():
        return web.Response(status=429, text="Too Many Requests\n", headers={"Retry-After": "1"})
    if rules.auth is not None and rules.auth.enabled and request.path not in rules.excluded:
        verdict = await rules.auth.check(request.headers.get("Authorization"))
        if not verdict.ok:
            if on_unauthorized is not None:
                on_unauthorized(request, verdict)
            if verdict.outcome is AuthOutcome.BUSY:
                return web.Response(status=429, text="Too Many Requests\n", headers={"Retry-After": "1"})
            return web.Response(status=401, text="Unauthorized\n", headers={"WWW-Authenticate": REALM})
    return await handler(request)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, default=str)
