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
import time
from typing import Any

from aiohttp import web

from agent.core.vocabulary import NoticeKind
from agent.devtools.simclouds import as_json
from agent.devtools.simrecords import GARBAGE, Fault, number
from agent.devtools.simstate import SimState
from agent.devtools.simwords import SimEventState, SimFault


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
            if fault.kind == SimFault.SLOW:
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
        if fault.kind == SimFault.STATUS:
            return web.Response(status=fault.status, text=f"simulated HTTP {fault.status}\n")
        if fault.kind == SimFault.GARBAGE:
            return web.Response(body=GARBAGE, content_type="application/octet-stream")
        if fault.kind == SimFault.EMPTY:
            return web.Response(body=b"", content_type="text/plain")
        if fault.kind == SimFault.HUGE:
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
                seconds=number(body, "seconds", 300, -10 * 365 * 86400),
                after=number(body, "after", 0),
                time_text=_opt_str(body, "time"),
                resources=_opt_list(body, "resources"),
                moving=bool(body.get("moving", False)),
            )
            return as_json(ev.as_dict())
        if path == "/restart":
            if self._restarting is not None and not self._restarting.done():
                raise ValueError("a restart is under way")
            down, shift = number(body, "down", 0, 0, 3600), number(body, "shift", 0, -86400, 86400)
            self.restart_soon(down, shift)
            return as_json({"restarting": True, "down": down, "shift": shift})
        if path == "/maintenance":
            ev = state.add_maintenance(
                kind=str(body.get("kind", "reboot")),
                seconds=number(body, "seconds", 86400, -10 * 365 * 86400),
                after=number(body, "after", 0),
                event_id=_opt_str(body, "id"),
                code=_opt_str(body, "code"),
                time_text=_opt_str(body, "time"),
                resources=_opt_list(body, "resources"),
            )
            return as_json(ev.as_dict())
        if path == "/cancel":
            done = state.cancel(_opt_str(body, "id"), str(body.get("state", SimEventState.CANCELED)))
            events = [e.as_dict() for e in state.events if e.id in done]
            return as_json(
                {"ended": done, "state": body.get("state", SimEventState.CANCELED), "events": events}
            )
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
