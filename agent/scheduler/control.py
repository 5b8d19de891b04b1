"""The scheduler's control-socket handlers: ``GET /health`` (``training-node-agent health-check``,
Slurm's HealthCheckProgram) and ``GET /scheduler/would`` (what a drill or a dry run would have done)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Protocol

from aiohttp import web

from agent.core.component import Route


class SchedulerControl(Protocol):
    """What the handlers read of the scheduler action (typed here so as not to import it)."""

    @property
    def kind(self) -> str | None: ...  # None: no scheduler, so nothing to wait for

    @property
    def node_name(self) -> str | None: ...

    @property
    def would(self) -> Mapping[str, list[str]]: ...

    @property
    def changed(self) -> asyncio.Event: ...  # a new Event after each reconcile: read it each time

    def health(self) -> str | None: ...


def routes(c: SchedulerControl) -> list[Route]:
    async def on_health(request: web.Request) -> web.Response:
        why = c.health()
        body = {"healthy": why is None, "why": why, "node": c.node_name}
        return web.json_response(body, status=200 if why is None else 503)

    async def on_would(request: web.Request) -> web.Response:
        event_id = request.query.get("event_id", "dry-run")
        wait = min(10.0, float(request.query.get("wait", "0"))) if c.kind is not None else 0.0
        # a drill's report comes when its episode ends; the requeue it would do is decided in the
        # next reconcile, so wait for that (bounded) rather than answer half
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                while not any(not ln.startswith("would drain") for ln in c.would.get(event_id, [])):
                    await c.changed.wait()
        return web.json_response({"event_id": event_id, "lines": c.would.get(event_id, [])})

    return [("GET", "/health", on_health), ("GET", "/scheduler/would", on_would)]
