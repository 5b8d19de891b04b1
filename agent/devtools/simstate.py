"""The metadata simulator's state: the notices and maintenance events it serves, the injected
faults, session tokens and the request log. Pure data and rules, no I/O; :mod:`simrecords` holds
the records, :mod:`simulator` serves them over HTTP and :mod:`simclouds` renders them in each
cloud's format."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from agent.core.vocabulary import Cloud, NoticeKind
from agent.devtools.simclouds import CloudSim, simulator_class
from agent.devtools.simrecords import FAULT_KINDS, Fault, SimEvent, number
from agent.devtools.simwords import ENDED_SIM_STATES, LIVE_SIM_STATES, SimEventState

LOG_SIZE = 2000


class SimState:
    """Everything the simulator serves; changed by the control API or directly in-process."""

    def __init__(self, provider: str, require_token: bool = False) -> None:
        face = simulator_class(provider)  # a ValueError naming the clouds when none is declared
        self.provider = provider
        self.require_token = require_token
        self.cloud: CloudSim = face(self)
        self.events: list[SimEvent] = []
        self.faults: list[Fault] = []
        self.overrides: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, float] = {}  # token -> monotonic expiry
        self.log: deque[dict[str, Any]] = deque(maxlen=LOG_SIZE)
        self.requests = 0
        self.acks: list[dict[str, Any]] = []
        self.version = 1
        self._seq = 0
        self._changed = asyncio.Event()
        self._timers: list[asyncio.TimerHandle] = []
        self.on_change: Callable[[str, SimEvent], None] | None = None
        self.on_request: Callable[[dict[str, Any]], None] | None = None
        self.closing = False

    # --- notices and maintenance -------------------------------------------------------------------

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _bump(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    def _schedule(self, ev: SimEvent, after: float) -> SimEvent:
        self.events.append(ev)
        if after > 0:
            handle = asyncio.get_running_loop().call_later(after, self._announce, ev)
            self._timers.append(handle)
        else:
            self._announce(ev)
        return ev

    def _announce(self, ev: SimEvent) -> None:
        if ev.state != SimEventState.PENDING:
            return
        ev.state = SimEventState.ACTIVE
        ev.announced_monotonic = time.monotonic()
        ev.announced_wall = time.time()
        ev.announced_at = datetime.fromtimestamp(ev.announced_wall, UTC)
        self._bump()
        if self.on_change:
            self.on_change("announced", ev)

    def add_notice(
        self,
        kind: str = NoticeKind.SPOT_TERMINATION,
        seconds: float = 300,
        after: float = 0,
        time_text: str | None = None,
        resources: list[str] | None = None,
        moving: bool = False,
    ) -> SimEvent:
        if kind not in self.cloud.notice_kinds:
            raise ValueError(
                f"{self.provider} has no {kind!r} notice; one of {', '.join(self.cloud.notice_kinds)}"
            )
        seq = self._next_seq()
        ev = SimEvent(
            id=self.cloud.event_id(seq) if self.provider == Cloud.AZURE else f"n-{seq}",
            kind=kind,
            maintenance=False,
            seconds=seconds,
            announce_at_wall=time.time() + after,
            time_text=time_text,
            resources=resources,
            moving=moving,
        )
        return self._schedule(ev, after)

    def add_maintenance(
        self,
        kind: str,
        seconds: float = 86400,
        after: float = 0,
        event_id: str | None = None,
        code: str | None = None,
        time_text: str | None = None,
        resources: list[str] | None = None,
    ) -> SimEvent:
        kinds = self.cloud.maintenance_kinds
        if not kinds:
            raise ValueError(f"{self.provider} announces no maintenance events through its metadata")
        if kind not in kinds:
            raise ValueError(
                f"{self.provider} maintenance kind must be one of {', '.join(kinds)}, got {kind!r}"
            )
        ev = SimEvent(
            id=event_id or self.cloud.event_id(self._next_seq()),
            kind=kind,
            maintenance=True,
            seconds=seconds,
            announce_at_wall=time.time() + after,
            time_text=time_text,
            code=code,
            resources=resources,
        )
        return self._schedule(ev, after)

    def cancel(self, event_id: str | None = None, state: str = SimEventState.CANCELED) -> list[str]:
        """End one event (or every pending/active one): ``canceled`` or ``completed``."""
        if state not in ENDED_SIM_STATES:
            raise ValueError(f"state must be canceled or completed, got {state!r}")
        if event_id is not None and not any(e.id == event_id for e in self.events):
            raise ValueError(f"no event {event_id!r}")
        done = []
        for ev in self.events:
            if ev.state in LIVE_SIM_STATES and (event_id is None or ev.id == event_id):
                ev.state = state
                ev.ended_monotonic, ev.ended_wall = time.monotonic(), time.time()
                done.append(ev.id)
                if self.on_change:
                    self.on_change(state, ev)
        if done:
            self._bump()
        return done

    def active_notices(self, kinds: tuple[str, ...]) -> list[SimEvent]:
        return [
            e
            for e in self.events
            if not e.maintenance and e.state == SimEventState.ACTIVE and e.kind in kinds
        ]

    def active_notice(self, kinds: tuple[str, ...]) -> SimEvent | None:
        active = self.active_notices(kinds)
        return active[-1] if active else None

    def active_maintenance(self) -> list[SimEvent]:
        return [e for e in self.events if e.maintenance and e.state == SimEventState.ACTIVE]

    def maintenance_listed(self) -> list[SimEvent]:
        """Active and ended maintenance events (AWS keeps listing ended ones for a week)."""
        return [
            e for e in self.events if e.maintenance and e.state in (SimEventState.ACTIVE, *ENDED_SIM_STATES)
        ]

    def start_events(self, ids: list[str]) -> list[str]:
        """Azure StartRequests: approve these events now. Returns the ids that are not active."""
        active = {e.id: e for e in self.events if e.state == SimEventState.ACTIVE}
        unknown = [i for i in ids if i not in active]
        if unknown:
            return unknown
        for i in ids:
            active[i].started = True
            self.acks.append({"event_id": i, "wall": time.time(), "monotonic": time.monotonic()})
        self._bump()
        return []

    async def wait_change(
        self, value: Callable[[], str], etag: Callable[[str], str], last: str, timeout: float
    ) -> str:
        """GCP ``wait_for_change``: return once ``etag(value())`` differs from ``last``, or at ``timeout``."""
        deadline = time.monotonic() + timeout
        while etag(value()) == last and not self.closing:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                break
        return value()

    # --- faults, overrides, tokens -----------------------------------------------------------------

    def add_fault(self, spec: dict[str, Any]) -> Fault:
        kind = spec.get("kind")
        if kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {', '.join(FAULT_KINDS)}, got {kind!r}")
        count = spec.get("count")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise ValueError(f"count must be a positive integer, got {count!r}")
        seconds = spec.get("seconds")
        fault = Fault(
            id=self._next_seq(),
            kind=kind,
            status=int(number(spec, "status", 500, 100, 599)),
            delay=number(spec, "delay", 3.0, 0, 600),
            size=int(number(spec, "bytes", 8 * 1024 * 1024, 0, 1 << 31)),
            path=str(spec.get("path", "")),
            method=str(spec.get("method", "")).upper(),
            count=count,
            until_monotonic=time.monotonic() + number(spec, "seconds", 0, 0, 86400) if seconds else None,
        )
        self.faults.append(fault)
        return fault

    def take_fault(self, method: str, path: str) -> Fault | None:
        now = time.monotonic()
        self.faults = [
            f
            for f in self.faults
            if (f.count is None or f.count > 0) and (f.until_monotonic or now + 1) > now
        ]
        for f in self.faults:
            if path.startswith(f.path) and (not f.method or f.method == method):
                f.hits += 1
                if f.count is not None:
                    f.count -= 1
                return f
        return None

    def set_override(self, spec: dict[str, Any]) -> None:
        path = spec.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            raise ValueError('override needs "path": "/..."')
        if spec.get("remove"):
            self.overrides.pop(path, None)
            return
        body = spec.get("body", "")
        if not isinstance(body, str):
            body = json.dumps(body)
        self.overrides[path] = {
            "status": int(number(spec, "status", 200, 100, 599)),
            "body": body,
            "content_type": str(spec.get("content_type", "text/plain")),
        }
        self._bump()

    def issue_token(self, ttl: int) -> str:
        token = secrets.token_urlsafe(32)
        self.tokens[token] = time.monotonic() + ttl
        return token

    def token_valid(self, token: str) -> bool:
        expiry = self.tokens.get(token)
        return expiry is not None and expiry > time.monotonic()

    def expire_tokens(self) -> int:
        n = len(self.tokens)
        self.tokens.clear()
        return n

    def shift(self, seconds: float) -> list[str]:
        """Move the deadline of every pending and active event by ``seconds`` (negative: earlier),
        as a service restarted with another clock or schedule would serve it."""
        moved = [ev.id for ev in self.events if ev.state in LIVE_SIM_STATES]
        for ev in self.events:
            if ev.id in moved:
                ev.seconds += seconds
        if moved:
            self._bump()
        return moved

    def reset(self) -> None:
        for h in self._timers:
            h.cancel()
        self._timers.clear()
        self.events.clear()
        self.faults.clear()
        self.overrides.clear()
        self.acks.clear()
        self.log.clear()
        self._bump()

    def close(self) -> None:
        for h in self._timers:
            h.cancel()
        self.closing = True
        self._bump()  # long-polls answer now rather than hold the shutdown

    def as_dict(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "provider": self.provider,
            "require_token": self.require_token,
            "now_wall": time.time(),
            "now_monotonic": now,
            "version": self.version,
            "events": [e.as_dict() for e in self.events],
            "faults": [f.as_dict() for f in self.faults],
            "overrides": self.overrides,
            "tokens_valid": sum(1 for t in self.tokens.values() if t > now),
            "requests": self.requests,
            "acks": self.acks,
            "notice_kinds": list(self.cloud.notice_kinds),
            "maintenance_kinds": list(self.cloud.maintenance_kinds),
        }


# --- the HTTP face -----------------------------------------------------------------------------------
