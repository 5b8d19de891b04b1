"""Bounds on the metrics port's connections, so that no client can starve Prometheus of it.

aiohttp limits the size of a request line and of one header, and closes a keep-alive connection
after an idle while; it does not bound how long a client may take to send its request head
(slowloris), the head's total size, a connection that never sends anything, or how many
connections are open. :class:`Guard` sits between asyncio and aiohttp's protocol and adds those:

- ``header_timeout``: from accept (the TLS handshake included) or from the first byte of a later
  request, the whole request head must arrive within it, or the connection is closed;
- ``idle_timeout``: a kept-alive connection with no request for that long is closed;
- ``max_header_bytes``: a request head larger than that gets a 431 and the connection is closed;
- ``max_connections``: at the cap, a new connection evicts the oldest connection that is not
  serving a request, preferring those that never had a request answered with success (a flood of
  idle or trickling connections then evicts itself, while Prometheus's kept-alive connection, which
  has had successful scrapes, goes last); when every connection is busy the newcomer gets a 503
  (with TLS it is closed: a handshake only to say "busy" is what a flood wants).

With TLS the guard sees the TCP connection first and starts its handshake when the
:class:`~agent.exporter.handshake.HandshakeGate` says so; a connection closed before its turn
costs no crypto.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agent.exporter.handshake import HandshakeGate


@dataclass(frozen=True)
class Limits:
    max_connections: int
    header_timeout: float
    idle_timeout: float
    max_header_bytes: int


@dataclass(frozen=True)
class Tls:
    context: ssl.SSLContext
    gate: HandshakeGate


class Closed(StrEnum):
    EVICTED = "evicted"
    REFUSED = "refused"
    HEADER_TIMEOUT = "header_timeout"
    IDLE_TIMEOUT = "idle_timeout"
    HEADER_TOO_LARGE = "header_too_large"
    CLIENT_CERT_SAN = "client_cert_san"
    TLS_HANDSHAKE = "tls_handshake"  # failed, timed out, or the client left during it


_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
_503 = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\nRetry-After: 1\r\n\r\n"


class ConnectionTable:
    """Every connection of the port, in accept order."""

    def __init__(
        self, limits: Limits, peer_ok: Callable[[Any], bool] = lambda _t: True, tls: Tls | None = None
    ) -> None:
        self.limits = limits
        self.tls = tls
        self.peer_ok = peer_ok  # client_allowed_sans, checked once the handshake is done
        self.guards: dict[Guard, None] = {}
        self.by_transport: dict[Any, Guard] = {}
        self.closed: Counter[Closed] = Counter()
        self.accepted = 0

    def admit(self, guard: Guard) -> bool:
        self.accepted += 1
        if len(self.guards) >= self.limits.max_connections and not self._evict_one():
            self.closed[Closed.REFUSED] += 1
            return False
        self.guards[guard] = None
        return True

    def _evict_one(self) -> bool:
        # a connection waiting for its TLS handshake, or in it, counts too: it is closed at once
        idle = [g for g in self.guards if not g.busy]
        if not idle:
            return False
        strangers = [g for g in idle if not g.proven]
        victim = strangers[0] if strangers else min(idle, key=lambda g: g.last_done)
        self.closed[Closed.EVICTED] += 1
        victim.close(abort=not victim.proven)
        return True

    def forget(self, guard: Guard) -> None:
        self.guards.pop(guard, None)
        if guard.transport is not None and self.by_transport.get(guard.transport) is guard:
            del self.by_transport[guard.transport]

    def request_started(self, transport: Any) -> None:
        g = self.by_transport.get(transport)
        if g is not None:
            g.started()

    def request_finished(self, transport: Any, success: bool) -> None:
        g = self.by_transport.get(transport)
        if g is not None:
            g.finished(success)


class Guard(asyncio.Protocol):
    """Wraps one aiohttp protocol instance; created by asyncio at accept, before any TLS."""

    def __init__(self, inner: asyncio.Protocol, table: ConnectionTable) -> None:
        self.inner = inner
        self.table = table
        self.transport: Any = None  # what the request is served over (TLS once the handshake is done)
        self._raw: Any = None  # the TCP transport, with TLS until the handshake is done
        self._handshake: asyncio.Task[None] | None = None
        # asyncio hands over what follows the handshake in the same read, before start_tls returns
        self._early: list[bytes] = []
        self.busy = False
        self.proven = False
        self.last_done = time.monotonic()
        self._head = 0  # bytes of the request head received so far
        self._in_head = True  # the first request's head is due from accept on
        self._gone = False  # closing, or closed before asyncio called connection_made
        self._inner_made = False
        self._admitted = table.admit(self)
        loop = asyncio.get_running_loop()
        # from accept: the wait for a handshake's turn and the handshake itself
        self._timer: asyncio.TimerHandle | None = loop.call_later(
            table.limits.header_timeout, self._expired, Closed.HEADER_TIMEOUT
        )

    # --- asyncio protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        tls = self.table.tls
        if tls is None:
            self._serve(transport)
            return
        self._raw = transport
        transport.pause_reading()  # the ClientHello waits in the socket for the handshake's turn
        if not self._admitted or self._gone:
            transport.abort()
        else:
            tls.gate.enqueue(self)

    def begin_tls(self) -> None:
        if not self._gone:
            self._handshake = asyncio.get_running_loop().create_task(self._tls())

    async def _tls(self) -> None:
        assert self.table.tls is not None
        try:
            tls_transport = await asyncio.get_running_loop().start_tls(
                self._raw,
                self,
                self.table.tls.context,
                server_side=True,
                ssl_handshake_timeout=self.table.limits.header_timeout,
            )
        except asyncio.CancelledError:  # closed by the table while handshaking
            self._raw.abort()
            return
        except (OSError, ValueError, RuntimeError):  # ssl.SSLError is an OSError
            tls_transport = None
        finally:
            self._handshake = None
        if tls_transport is None:  # the handshake failed, timed out, or the client left
            if not self._gone:
                self.table.closed[Closed.TLS_HANDSHAKE] += 1
            self.close(abort=True)
            return
        self._serve(tls_transport)

    def _serve(self, transport: Any) -> None:
        self.transport = transport
        if not self._admitted:
            self._reply_and_close(_503)
        elif self._gone:  # the handshake finished after the deadline had already passed
            transport.abort()
        elif not self.table.peer_ok(transport):
            self.table.closed[Closed.CLIENT_CERT_SAN] += 1
            self.close(abort=True)
        else:
            self.table.by_transport[transport] = self
            self._arm(self.table.limits.header_timeout, Closed.HEADER_TIMEOUT)
            self._inner_made = True
            self.inner.connection_made(transport)
            early, self._early = self._early, []
            for data in early:
                self.data_received(data)

    def data_received(self, data: bytes) -> None:
        if not self._inner_made or self._gone:
            if self._handshake is not None and not self._gone:
                self._early.append(data)
            return
        if not self.busy:
            if not self._in_head:  # first byte of a new request after an idle keep-alive
                self._in_head = True
                self._arm(self.table.limits.header_timeout, Closed.HEADER_TIMEOUT)
            self._head += len(data)
            if self._head > self.table.limits.max_header_bytes:
                self.table.closed[Closed.HEADER_TOO_LARGE] += 1
                self._reply_and_close(_431)
                return
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self._inner_made and not self._gone else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self.table.forget(self)
        if self.table.tls is not None:
            self.table.tls.gate.discard(self)
        self._gone = True
        if self._inner_made:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # --- request boundaries (from the app's middleware) -------------------------------------------

    def started(self) -> None:
        self.busy = True
        self._head = 0
        self._in_head = False
        self._cancel()

    def finished(self, success: bool) -> None:
        self.busy = False
        self.proven = self.proven or success
        self.last_done = time.monotonic()
        self._arm(self.table.limits.idle_timeout, Closed.IDLE_TIMEOUT)

    # --- closing ----------------------------------------------------------------------------------

    def close(self, abort: bool = False) -> None:
        self._cancel()
        self.table.forget(self)
        self._gone = True
        if self.transport is None:  # TLS not done yet: closed before (or during) its handshake
            if self.table.tls is not None:
                self.table.tls.gate.discard(self)
            if self._handshake is not None:
                self._handshake.cancel()
            if self._raw is not None:
                self._raw.abort()
            return  # plain: asyncio has not called connection_made yet; it finds _gone set
        if abort:
            self.transport.abort()
        else:
            self.transport.close()

    def _reply_and_close(self, reply: bytes) -> None:
        self._cancel()
        self.table.forget(self)
        self._gone = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(reply)
            self.transport.close()

    def _arm(self, seconds: float, why: Closed) -> None:
        self._cancel()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expired, why)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self, why: Closed) -> None:
        self._timer = None
        if self.busy:
            return
        self.table.closed[why] += 1
        self.close(abort=True)
