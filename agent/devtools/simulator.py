"""The metadata simulator: a local stand-in for a cloud's metadata service (like AWS's
amazon-ec2-metadata-mock), for tests, the demo and people rehearsing their trainer integration.

It serves one cloud's real paths, headers, status codes and body formats (:mod:`simclouds`), with
notices and maintenance events scheduled and canceled at run time, session tokens (``require_token``
for hardened mode / IMDSv2-only), and injected faults (5xx, slow replies, garbage, empty and huge
bodies, dropped connections, token endpoint failures, expired tokens). A small control API under
``/_sim/`` on the same port drives it; see docs/preemption.md for the reference.

In-process use (tests, the benchmark, the demo)::

    sim = await start_simulator("alibaba")          # 127.0.0.1, ephemeral port
    n = sim.state.add_notice(NoticeKind.SPOT_TERMINATION, seconds=300)
    ...                                            # sim.url is the [preemption] endpoint
    await sim.close()
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from agent.core.vocabulary import NoticeKind
from agent.devtools.simclouds import CLOUDS, CloudSim, as_json

LOG_SIZE = 2000
FAULT_KINDS = ("status", "slow", "garbage", "empty", "huge", "drop")
GARBAGE = b"\x89PNG\r\n\x1a\n\x00\xff\xfe<html><body>{not json\x00" + bytes(range(128, 256))


@dataclass
class SimEvent:
    """A notice (spot, rebalance, preempt) or a maintenance event, as the simulator holds it."""

    id: str
    kind: str  # a notice kind (spot-termination ...) or a maintenance word (reboot, migrate ...)
    maintenance: bool
    seconds: float  # deadline = announce time + seconds
    announce_at_wall: float
    time_text: str | None = None  # served instead of the formatted deadline (bad-input rehearsals)
    code: str | None = None  # the cloud's own code, overriding the kind's usual one
    resources: list[str] | None = None  # Azure: the VMs the event is for
    state: str = "pending"  # pending | active | canceled | completed
    started: bool = False  # Azure StartRequests approved it (Alibaba: executing)
    announced_at: datetime | None = None
    announced_wall: float | None = None
    announced_monotonic: float | None = None
    ended_wall: float | None = None
    ended_monotonic: float | None = None
    # recomputed on every read, like amazon-ec2-metadata-mock's default spot mode: the deadline is the
    # time of the request + ``seconds``, and a rebalance's noticeTime the time of the request
    moving: bool = False

    @property
    def deadline(self) -> datetime:
        if self.moving:
            return datetime.now(UTC) + timedelta(seconds=self.seconds)
        start = self.announced_at or datetime.fromtimestamp(self.announce_at_wall, UTC)
        return start + timedelta(seconds=self.seconds)

    @property
    def issued_at(self) -> datetime:
        """When the cloud says it issued the notice (AWS rebalance ``noticeTime``)."""
        if self.moving:
            return datetime.now(UTC)
        return self.announced_at or self.deadline

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "maintenance": self.maintenance,
            "state": self.state,
            "started": self.started,
            "seconds": self.seconds,
            "deadline": self.deadline.isoformat(),
            "time_text": self.time_text,
            "moving": self.moving,
            "code": self.code,
            "resources": self.resources,
            "announce_at_wall": self.announce_at_wall,
            "announced_wall": self.announced_wall,
            "announced_monotonic": self.announced_monotonic,
            "ended_wall": self.ended_wall,
            "ended_monotonic": self.ended_monotonic,
        }


@dataclass
class Fault:
    id: int
    kind: str
    status: int = 500
    delay: float = 3.0
    size: int = 8 * 1024 * 1024
    path: str = ""  # prefix of the metadata paths it hits ("" = all, the token endpoint included)
    method: str = ""  # "" = any
    count: int | None = None  # requests left to hit; None = until cleared or expired
    until_monotonic: float | None = None
    hits: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items()}


def _float(
    spec: dict[str, Any], key: str, default: float, lo: float = 0.0, hi: float = 10 * 365 * 86400
) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise ValueError(f"{key} must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


class SimState:
    """Everything the simulator serves; changed by the control API or directly in-process."""

    def __init__(self, provider: str, require_token: bool = False) -> None:
        if provider not in CLOUDS:
            raise ValueError(f"unknown provider {provider!r}; one of {', '.join(CLOUDS)}")
        self.provider = provider
        self.require_token = require_token
        self.cloud: CloudSim = CLOUDS[provider](self)
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
        if ev.state != "pending":
            return
        ev.state = "active"
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
            id=self.cloud.event_id(seq) if self.provider == "azure" else f"n-{seq}",
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

    def cancel(self, event_id: str | None = None, state: str = "canceled") -> list[str]:
        """End one event (or every pending/active one): ``canceled`` or ``completed``."""
        if state not in ("canceled", "completed"):
            raise ValueError(f"state must be canceled or completed, got {state!r}")
        if event_id is not None and not any(e.id == event_id for e in self.events):
            raise ValueError(f"no event {event_id!r}")
        done = []
        for ev in self.events:
            if ev.state in ("pending", "active") and (event_id is None or ev.id == event_id):
                ev.state = state
                ev.ended_monotonic, ev.ended_wall = time.monotonic(), time.time()
                done.append(ev.id)
                if self.on_change:
                    self.on_change(state, ev)
        if done:
            self._bump()
        return done

    def active_notices(self, kinds: tuple[str, ...]) -> list[SimEvent]:
        return [e for e in self.events if not e.maintenance and e.state == "active" and e.kind in kinds]

    def active_notice(self, kinds: tuple[str, ...]) -> SimEvent | None:
        active = self.active_notices(kinds)
        return active[-1] if active else None

    def active_maintenance(self) -> list[SimEvent]:
        return [e for e in self.events if e.maintenance and e.state == "active"]

    def maintenance_listed(self) -> list[SimEvent]:
        """Active and ended maintenance events (AWS keeps listing ended ones for a week)."""
        return [e for e in self.events if e.maintenance and e.state in ("active", "canceled", "completed")]

    def start_events(self, ids: list[str]) -> list[str]:
        """Azure StartRequests: approve these events now. Returns the ids that are not active."""
        active = {e.id: e for e in self.events if e.state == "active"}
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
            status=int(_float(spec, "status", 500, 100, 599)),
            delay=_float(spec, "delay", 3.0, 0, 600),
            size=int(_float(spec, "bytes", 8 * 1024 * 1024, 0, 1 << 31)),
            path=str(spec.get("path", "")),
            method=str(spec.get("method", "")).upper(),
            count=count,
            until_monotonic=time.monotonic() + _float(spec, "seconds", 0, 0, 86400) if seconds else None,
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
            "status": int(_float(spec, "status", 200, 100, 599)),
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
        moved = [ev.id for ev in self.events if ev.state in ("pending", "active")]
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


class Simulator:
    def __init__(self, state: SimState) -> None:
        self.state = state
        self.runner: web.AppRunner | None = None
        self.host = "127.0.0.1"
        self.port = 0
        self.restarts = 0
        self._restarting: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        app = web.Application()  # a new one each start: an application is not set up twice
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # a client that goes away cancels its handler: GCP long-polls must not pile up; and a stop (a
        # restart) drops the requests in flight, as a service going down does, instead of answering them
        self.runner = web.AppRunner(
            app, access_log=None, handle_signals=False, handler_cancellation=True, shutdown_timeout=0.1
        )
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port, reuse_address=True)
        await site.start()
        self.host = host
        for addr in self.runner.addresses:
            if isinstance(addr, tuple):
                self.port = int(addr[1])
                break
        return self.port

    async def close(self) -> None:
        if self._restarting is not None:
            self._restarting.cancel()
        self.state.close()
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def restart(self, down: float = 0.0, shift: float = 0.0) -> None:
        """Stop serving (connections refused), wait ``down`` seconds, and serve again on the same
        port with every deadline moved by ``shift`` seconds: a metadata service restarting, maybe
        with an earlier time for the same notice."""
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
        self.state.shift(shift)
        await asyncio.sleep(down)
        await self.start(self.host, self.port)
        self.restarts += 1

    def restart_soon(self, down: float, shift: float) -> None:
        async def later() -> None:
            await asyncio.sleep(0.05)  # the control request's answer goes out first
            await self.restart(down, shift)

        self._restarting = asyncio.ensure_future(later())

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/_sim/"):
            try:
                return await self._control(request)
            except ValueError as e:
                return as_json({"error": str(e)}, 400)
        state = self.state
        state.requests += 1
        entry: dict[str, Any] = {
            "seq": state.requests,
            "method": request.method,
            "path": request.path,
            "query": request.query_string,
            "wall": time.time(),
            "monotonic": time.monotonic(),
            "token": bool(state.cloud.token and request.headers.get(state.cloud.token.token_header)),
            "fault": None,
            "status": None,
        }
        state.log.append(entry)
        try:
            resp = await self._metadata(request, entry)
        except (ConnectionError, asyncio.CancelledError):
            entry["status"] = "aborted"
            raise
        if entry["status"] is None:
            entry["status"] = resp.status
        if state.on_request:
            state.on_request(entry)
        return resp

    async def _metadata(self, request: web.Request, entry: dict[str, Any]) -> web.StreamResponse:
        state, cloud = self.state, self.state.cloud
        fault = state.take_fault(request.method, request.path)
        if fault is not None:
            entry["fault"] = fault.kind
            if fault.kind == "slow":
                await asyncio.sleep(fault.delay)
            else:
                return await self._fault_reply(request, fault, entry)
        refused = cloud.check_headers(request)
        if refused is not None:
            return refused
        scheme = cloud.token
        if scheme is not None and request.path == scheme.path:
            return self._token_reply(request)
        if scheme is not None:
            token = request.headers.get(scheme.token_header)
            if token is not None and not state.token_valid(token):
                return web.Response(status=401, text="Unauthorized\n", content_type="text/plain")
            if token is None and state.require_token:
                return web.Response(
                    status=cloud.missing_token_status, text="token required\n", content_type="text/plain"
                )
        override = state.overrides.get(request.path)
        if override is not None:
            return web.Response(
                status=override["status"], text=override["body"], content_type=override["content_type"]
            )
        return await cloud.serve(request)

    def _token_reply(self, request: web.Request) -> web.Response:
        scheme = self.state.cloud.token
        assert scheme is not None
        if request.method != "PUT":
            return web.Response(status=405, text="Method Not Allowed\n", headers={"Allow": "PUT"})
        if "X-Forwarded-For" in request.headers:
            return web.Response(status=403, text="Forbidden\n")
        ttl = request.headers.get(scheme.ttl_header, "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            return web.Response(status=400, text=f"{scheme.ttl_header} must be 1-21600\n")
        token = self.state.issue_token(int(ttl))
        return web.Response(text=token, content_type="text/plain", headers={scheme.ttl_header: ttl})

    async def _fault_reply(
        self, request: web.Request, fault: Fault, entry: dict[str, Any]
    ) -> web.StreamResponse:
        if fault.kind == "status":
            return web.Response(status=fault.status, text=f"simulated HTTP {fault.status}\n")
        if fault.kind == "garbage":
            return web.Response(body=GARBAGE, content_type="application/octet-stream")
        if fault.kind == "empty":
            return web.Response(body=b"", content_type="text/plain")
        if fault.kind == "huge":
            resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await resp.prepare(request)
            chunk = b"A" * 65536
            try:
                for _ in range(0, fault.size, len(chunk)):
                    await resp.write(chunk)
            except (ConnectionError, RuntimeError):
                entry["status"] = "aborted by client"
                return resp
            await resp.write_eof()
            return resp
        # drop: close the connection without an answer
        if request.transport is not None:
            request.transport.close()
        entry["status"] = "dropped"
        raise asyncio.CancelledError

    # --- control API ---------------------------------------------------------------------------------

    async def _control(self, request: web.Request) -> web.Response:
        state = self.state
        path = request.path.removeprefix("/_sim")
        if request.method == "GET" and path == "/state":
            return as_json(state.as_dict())
        if request.method == "GET" and path == "/requests":
            since = int(request.query.get("since", "0") or 0)
            prefix = request.query.get("path", "")
            return as_json([e for e in state.log if e["seq"] > since and e["path"].startswith(prefix)])
        if request.method != "POST":
            return as_json({"error": f"no {request.method} /_sim{path}"}, 404)
        body = await _json_body(request)
        if path == "/notice":
            ev = state.add_notice(
                kind=str(body.get("kind", NoticeKind.SPOT_TERMINATION)),
                seconds=_float(body, "seconds", 300, -10 * 365 * 86400),
                after=_float(body, "after", 0),
                time_text=_opt_str(body, "time"),
                resources=_opt_list(body, "resources"),
                moving=bool(body.get("moving", False)),
            )
            return as_json(ev.as_dict())
        if path == "/restart":
            if self._restarting is not None and not self._restarting.done():
                raise ValueError("a restart is under way")
            down, shift = _float(body, "down", 0, 0, 3600), _float(body, "shift", 0, -86400, 86400)
            self.restart_soon(down, shift)
            return as_json({"restarting": True, "down": down, "shift": shift})
        if path == "/maintenance":
            ev = state.add_maintenance(
                kind=str(body.get("kind", "reboot")),
                seconds=_float(body, "seconds", 86400, -10 * 365 * 86400),
                after=_float(body, "after", 0),
                event_id=_opt_str(body, "id"),
                code=_opt_str(body, "code"),
                time_text=_opt_str(body, "time"),
                resources=_opt_list(body, "resources"),
            )
            return as_json(ev.as_dict())
        if path == "/cancel":
            done = state.cancel(_opt_str(body, "id"), str(body.get("state", "canceled")))
            events = [e.as_dict() for e in state.events if e.id in done]
            return as_json({"ended": done, "state": body.get("state", "canceled"), "events": events})
        if path == "/fault":
            return as_json(state.add_fault(body).as_dict())
        if path == "/clear-faults":
            n = len(state.faults)
            state.faults.clear()
            return as_json({"cleared": n})
        if path == "/override":
            state.set_override(body)
            return as_json({"overrides": state.overrides})
        if path == "/expire-tokens":
            return as_json({"expired": state.expire_tokens()})
        if path == "/reset":
            state.reset()
            return as_json({"reset": True})
        return as_json({"error": f"no POST /_sim{path}"}, 404)


async def _json_body(request: web.Request) -> dict[str, Any]:
    raw = await request.text()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"control body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise ValueError("control body must be a JSON object")
    return body


def _opt_str(body: dict[str, Any], key: str) -> str | None:
    v = body.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ValueError(f"{key} must be a string, got {v!r}")
    return v


def _opt_list(body: dict[str, Any], key: str) -> list[str] | None:
    v = body.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ValueError(f"{key} must be a list of strings, got {v!r}")
    return v


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def start_simulator(
    provider: str, host: str = "127.0.0.1", port: int = 0, *, require_token: bool = False
) -> Simulator:
    """Start a simulator on the running loop; ``sim.port`` / ``sim.url`` tell where it listens."""
    sim = Simulator(SimState(provider, require_token=require_token))
    await sim.start(host, port)
    return sim
