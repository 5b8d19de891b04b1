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
  has had successful scrapes, goes last); when every connection is busy the newcomer gets a 503.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


@dataclass(frozen=True)
class Limits:
    max_connections: int
    header_timeout: float
    idle_timeout: float
    max_header_bytes: int


class Closed(StrEnum):
    EVICTED = "evicted"
    REFUSED = "refused"
    HEADER_TIMEOUT = "header_timeout"
    IDLE_TIMEOUT = "idle_timeout"
    HEADER_TOO_LARGE = "header_too_large"
    CLIENT_CERT_SAN = "client_cert_san"


_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
_503 = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\nRetry-After: 1\r\n\r\n"


class ConnectionTable:
    """Every connection of the port, in accept order."""

    def __init__(self, limits: Limits, peer_ok: Callable[[Any], bool] = lambda _t: True) -> None:
        self.limits = limits
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
        # a connection still in its TLS handshake counts too: evicting it closes it the moment
        # the handshake completes (asyncio's handshake timeout bounds it until then)
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
    """Wraps one aiohttp protocol instance; created by asyncio at accept (before the handshake)."""

    def __init__(self, inner: asyncio.Protocol, table: ConnectionTable) -> None:
        self.inner = inner
        self.table = table
        self.transport: Any = None
        self.busy = False
        self.proven = False
        self.last_done = time.monotonic()
        self._head = 0  # bytes of the request head received so far
        self._in_head = True  # the first request's head is due from accept on
        self._gone = False  # closing (or to be closed when the handshake completes)
        self._inner_made = False
        self._admitted = table.admit(self)
        loop = asyncio.get_running_loop()
        # asyncio's own ssl_handshake_timeout (the same value) closes a stuck handshake; the extra
        # second only frees the table entry of a connection whose handshake never completed
        self._timer: asyncio.TimerHandle | None = loop.call_later(
            table.limits.header_timeout + 1.0, self._expired, Closed.HEADER_TIMEOUT
        )

    # --- asyncio protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
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

    def data_received(self, data: bytes) -> None:
        if not self._inner_made or self._gone:
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
        self._gone = True  # during the handshake: closed as soon as it completes
        if self.transport is None:
            return
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
