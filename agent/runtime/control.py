"""The local control surface: an HTTP API on a unix socket (mode 0660).

Everything that changes state (reload, drill, checkpoint ack) is only reachable here, never on the
metrics port. The CLI's ``status``, ``drill`` and ``ack`` commands are clients of this socket.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web


class ControlServer:
    def __init__(self, path: str) -> None:
        self.path = path
        self.app = web.Application()
        self._runner: web.AppRunner | None = None
        # handlers can be swapped on reload without re-binding the socket
        self._handlers: dict[tuple[str, str], Any] = {}
        self.app.router.add_route("*", "/{tail:.*}", self._dispatch)

    def route(self, method: str, path: str, handler: Any) -> None:
        self._handlers[(method.upper(), path)] = handler

    def clear_routes(self, keep: tuple[str, ...] = ()) -> None:
        self._handlers = {k: v for k, v in self._handlers.items() if k[1] in keep}

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        handler = self._handlers.get((request.method, request.path))
        if handler is None:
            known = sorted({p for _, p in self._handlers})
            return web.json_response(
                {"error": f"no {request.method} {request.path}", "paths": known}, status=404
            )
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except (ValueError, json.JSONDecodeError) as e:
            return web.json_response({"error": str(e)}, status=400)

    async def start(self) -> None:
        path = Path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            if path.is_socket():
                path.unlink()  # stale socket of a previous run
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.UnixSite(self._runner, str(path))
        old = os.umask(0o117)  # create it 0660 without a window where it is wider
        try:
            await site.start()
        finally:
            os.umask(old)
        os.chmod(path, 0o660)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


_START = "start it: systemctl start training-node-agent"
_JOIN = (
    "run as root or join the training-node-agent group "
    "(sudo usermod -aG training-node-agent $USER, then log in again)"
)


async def control_request(
    socket_path: str, method: str, path: str, payload: Any = None, timeout: float = 30.0
) -> tuple[int, Any]:
    """One request to a running agent; raises ``ConnectionError`` with one line that says what is
    wrong and how to fix it."""
    if not os.path.exists(socket_path):
        raise ConnectionError(f"no agent control socket at {socket_path}: is the agent running? ({_START})")
    conn = aiohttp.UnixConnector(path=socket_path)
    try:
        async with (
            aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=timeout)) as s,
            s.request(method, f"http://agent{path}", json=payload) as resp,
        ):
            text = await resp.text()
            try:
                return resp.status, json.loads(text)
            except json.JSONDecodeError:
                return resp.status, text
    except aiohttp.ClientConnectorError as e:
        raise ConnectionError(_connect_error(socket_path, e.os_error)) from None
    except PermissionError as e:
        raise ConnectionError(_connect_error(socket_path, e)) from None


def _connect_error(path: str, e: OSError) -> str:
    if e.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied on {path}: {_JOIN}"
    if e.errno == errno.ECONNREFUSED:
        return f"nothing listens on {path} (a stale socket: the agent is not running; {_START})"
    return f"cannot connect to {path}: {e.strerror or e}"
