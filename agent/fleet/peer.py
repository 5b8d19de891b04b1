"""The node that sets this node's job's pace, from the fleet's Prometheus (``[fleet] prometheus_url``).

A waiting node's agent sees only that it waits (sync-wait); the fleet rules know on whom
(``TrainingJobStraggler``, configs/prometheus/rules.yml). Every ``[fleet] poll`` this part asks
Prometheus for that alert of the job the node's trainers name, and the classifier adds "the job's
pace is set by <node> (<class>/<reason>)" to a sync-wait verdict. Optional and never required: no URL,
no job, an error or a slow answer only leave the line out (the status says why).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import aiohttp
import structlog

from agent.context import Context
from agent.core.component import HasStatus

log = structlog.get_logger("fleet")

ALERT = "TrainingJobStraggler"
SAFE = re.compile(r"^[A-Za-z0-9_.:@+/-]{1,128}$")  # label values shown as they are; others are dropped
MAX_NAMED = 3


def query_for(job: str) -> str:
    return f'ALERTS{{alertname="{ALERT}", alertstate="firing", training_job="{job}"}}'


def pace_note(body: Any) -> str | None:
    """The sentence for a Prometheus ``/api/v1/query`` answer, or None when no straggler fires (pure;
    an answer of the wrong shape is no straggler)."""
    if not isinstance(body, dict) or body.get("status") != "success":
        return None
    result = (body.get("data") or {}).get("result") if isinstance(body.get("data"), dict) else None
    named = []
    for item in result if isinstance(result, list) else []:
        labels = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(labels, dict):
            continue
        node, cls, reason = (labels.get(k) for k in ("instance", "class", "reason"))
        if all(isinstance(v, str) and SAFE.match(v) for v in (node, cls, reason)):
            named.append(f"{node} ({cls}/{reason})")
    if not named:
        return None
    named = sorted(set(named))
    more = f" and {len(named) - MAX_NAMED} more" if len(named) > MAX_NAMED else ""
    return "the job's pace is set by " + ", ".join(named[:MAX_NAMED]) + more


class FleetPeer(HasStatus):
    name = "fleet"

    def __init__(self, ctx: Context, job: Callable[[], str | None]) -> None:
        self.cfg = ctx.cfg.fleet
        self.job = job  # the job the node's trainers name (the step figures)
        self.note: str | None = None
        self.error: str | None = None
        self.asked_at: float | None = None

    def peer_note(self) -> str | None:
        return self.note

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.cfg.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                await self._ask(session)
                await asyncio.sleep(self.cfg.poll)

    async def _ask(self, session: aiohttp.ClientSession) -> None:
        job = self.job()
        if not job:
            self.note, self.error = None, "no job named by the trainers (step figures missing)"
            return
        url = f"{self.cfg.prometheus_url}/api/v1/query?{urlencode({'query': query_for(job)})}"
        try:
            async with session.get(url) as r:
                body = await r.json(content_type=None) if r.status == 200 else None
                why = None if r.status == 200 else f"HTTP {r.status}"
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            body, why = None, f"{type(e).__name__}: {e}"[:200]
        self.asked_at = time.time()
        if why is not None:
            if self.error != why:
                log.warning("cannot ask the fleet's Prometheus", error=why)
            self.note, self.error = None, why
            return
        self.note, self.error = pace_note(body), None

    async def stop(self) -> None:
        return None

    def status(self) -> dict[str, Any]:
        why = self.error or "none firing"
        lines = [f"fleet: {self.note}" if self.note else f"fleet: no straggler named ({why})"]
        return {"note": self.note, "error": self.error, "asked_at": self.asked_at, "lines": lines}
