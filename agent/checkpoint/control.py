"""The checkpoint action's control-socket handlers: ack, drill and report."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import structlog
from aiohttp import web

from agent.checkpoint.episodelog import Episode
from agent.checkpoint.request import clean_ack
from agent.core.events import PreemptionEvent
from agent.core.vocabulary import Cloud, EpisodeState, NoticeKind

log = structlog.get_logger("checkpoint")

_KIND = re.compile(r"^[a-z][a-z0-9-]{0,63}$")


class CheckpointControl(Protocol):
    """What the handlers read and ask of the checkpoint action: typed here, not as the component, so
    that this face does not import the module that imports it."""

    def episodes(self) -> list[Episode]: ...

    def find_episode(self, event_id: str) -> Episode | None: ...

    def open_requested(self) -> list[Episode]: ...

    def acknowledge(self, event_id: str, ack: dict[str, Any]) -> None: ...

    def finished(self, event_id: str) -> asyncio.Future[None] | None: ...

    def begin_drill(self, event_id: str, dry_run: bool) -> asyncio.Future[None]: ...

    def end_drill(self, event_id: str) -> None: ...

    def post_notice(self, ev: PreemptionEvent) -> None: ...

    def cancel(self, event_id: str, why: str) -> None: ...

    def report(self, ep: Episode) -> dict[str, Any]: ...


def routes(c: CheckpointControl) -> list[tuple[str, str, Any]]:
    async def on_ack(request: web.Request) -> web.Response:
        return await ack(c, request)

    async def on_drill(request: web.Request) -> web.Response:
        return await drill(c, request)

    async def on_report(request: web.Request) -> web.Response:
        return await report(c, request)

    return [
        ("POST", "/checkpoint/ack", on_ack),
        ("POST", "/checkpoint/drill", on_drill),
        ("GET", "/checkpoint/report", on_report),
    ]


async def ack(c: CheckpointControl, request: web.Request) -> web.Response:
    body = await _json_body(request)
    event_id = body.get("event_id")
    if event_id is None:
        pending = c.open_requested()
        if not pending:
            return web.json_response({"error": "no checkpoint request is open"}, status=404)
        event_id = pending[-1].event_id
    ep = c.find_episode(str(event_id))
    if ep is None:
        return web.json_response({"error": f"unknown event {event_id!r}"}, status=404)
    if ep.phase == EpisodeState.COMPLETED:
        return web.json_response({"error": "already acknowledged", "event_id": ep.event_id}, status=409)
    if ep.phase != EpisodeState.REQUESTED:
        return web.json_response(
            {"error": f"event {ep.event_id} is {ep.phase}; nothing to acknowledge"}, status=409
        )
    c.acknowledge(ep.event_id, clean_ack(body, via="control socket"))
    fut = c.finished(ep.event_id)
    if fut is not None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await asyncio.shield(fut)
    return web.json_response(
        {
            "ok": ep.phase == EpisodeState.COMPLETED,
            "event_id": ep.event_id,
            "phase": ep.phase,
            "duration_seconds": ep.duration,
            "before_deadline": ep.phase == EpisodeState.COMPLETED,
        }
    )


async def drill(c: CheckpointControl, request: web.Request) -> web.Response:
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
    done = c.begin_drill(event_id, bool(body.get("dry_run")))
    log.info("drill started", event_id=event_id, kind=kind, deadline_seconds=deadline)
    c.post_notice(
        PreemptionEvent(
            provider=Cloud.DRILL,
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
        async with asyncio.timeout(max(0.5, wait) + 1.0):
            await asyncio.shield(done)
    c.end_drill(event_id)
    ep = c.find_episode(event_id)
    if ep is None:
        return web.json_response({"error": "the drill notice was not picked up"}, status=500)
    if ep.open:
        c.cancel(event_id, f"drill stopped waiting after {wait:.0f} s")
    return web.json_response(c.report(ep))


async def report(c: CheckpointControl, request: web.Request) -> web.Response:
    event_id = request.query.get("event_id")
    if event_id:
        ep = c.find_episode(event_id)
    else:
        eps = sorted(c.episodes(), key=lambda e: e.requested_at or e.received_at)
        ep = eps[-1] if eps else None
    if ep is None:
        return web.json_response({"error": "no checkpoint episode yet"}, status=404)
    return web.json_response(c.report(ep))


async def _json_body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    body = await request.json()
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ValueError("expected a JSON object")
    return body
