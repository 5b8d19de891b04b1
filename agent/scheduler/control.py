"""The scheduler's control-socket handlers: ``GET /health`` (``training-node-agent health-check``,
Slurm's HealthCheckProgram) and ``GET /scheduler/would`` (what a drill or a dry run would have done)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from aiohttp import web

from agent.core.component import Route

if TYPE_CHECKING:
    from agent.scheduler.component import SchedulerComponent


def routes(c: SchedulerComponent) -> list[Route]:
    async def on_health(request: web.Request) -> web.Response:
        why = c.health()
        body = {"healthy": why is None, "why": why, "node": c.node_name}
        return web.json_response(body, status=200 if why is None else 503)

    async def on_would(request: web.Request) -> web.Response:
        event_id = request.query.get("event_id", "dry-run")
        wait = min(10.0, float(request.query.get("wait", "0"))) if c.backend is not None else 0.0
        # a drill's report comes when its episode ends; the requeue it would do is decided in the
        # next reconcile, so wait for that (bounded) rather than answer half
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                while not any(not ln.startswith("would drain") for ln in c.would.get(event_id, [])):
                    await c.changed.wait()
        return web.json_response({"event_id": event_id, "lines": c.would.get(event_id, [])})

    return [("GET", "/health", on_health), ("GET", "/scheduler/would", on_would)]
