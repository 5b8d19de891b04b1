"""The read-only TCP face: /metrics, /healthz, /api/v1/status and a landing page.

Nothing here changes state; that is the control socket's job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

LANDING = """<!doctype html><html><head><title>training-node-agent</title></head><body>
<h1>training-node-agent {version}</h1>
<p>Health agent for GPU training nodes.</p>
<ul>
<li><a href="/metrics">/metrics</a> Prometheus exposition (OpenMetrics when asked)</li>
<li><a href="/healthz">/healthz</a> 200 while sampling progresses, 503 with the reason otherwise</li>
<li><a href="/api/v1/status">/api/v1/status</a> verdict, notices, collectors and the snapshot</li>
</ul></body></html>
"""


def make_app(
    registry: CollectorRegistry,
    health: Callable[[], str | None],
    status: Callable[[], dict[str, Any]],
    version: str,
) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(registry)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def healthz(_: web.Request) -> web.Response:
        reason = health()
        if reason is None:
            return web.json_response({"status": "ok"})
        return web.json_response({"status": "stalled", "reason": reason}, status=503)

    async def api_status(_: web.Request) -> web.Response:
        return web.json_response(status(), dumps=_dumps)

    async def landing(_: web.Request) -> web.Response:
        return web.Response(text=LANDING.format(version=version), content_type="text/html")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/v1/status", api_status)
    app.router.add_get("/", landing)
    return app


def _dumps(obj: Any) -> str:
    import json

    return json.dumps(obj, default=str)
