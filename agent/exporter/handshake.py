"""TLS handshakes on the metrics port, started at a bounded rate.

A handshake costs the event loop about a millisecond of CPU, and the loop is also what answers
Prometheus. Clients that connect in step (a flood whose connections are evicted together and come
back together a second later) put a hundred handshakes into one tick, and every scrape behind
them waits. So the port accepts TCP connections at once but starts their TLS handshakes from a
token bucket (``rate`` a second, ``burst`` at once), in accept order, as HAProxy's ``maxsslrate``
does. A connection waiting for its turn has cost nothing but a socket: when the connection table
evicts it, it is closed before any crypto is done. Prometheus keeps its connection alive, so it
needs a handful of handshakes a day, not a hundred a second.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from agent.core.tokens import TokenBucket


class Waiting(Protocol):
    def begin_tls(self) -> None: ...


class HandshakeGate:
    def __init__(self, rate: float, burst: int) -> None:
        self._bucket = TokenBucket(burst, rate)
        self._queue: deque[Waiting] = deque()
        self._wakeup: asyncio.TimerHandle | None = None
        self.started = 0
        self.deferred = 0  # handshakes that had to wait for a token

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def enqueue(self, conn: Waiting) -> None:
        if not self._queue and self._bucket.try_take():
            self.started += 1
            conn.begin_tls()
            return
        self.deferred += 1
        self._queue.append(conn)
        self._schedule()

    def discard(self, conn: Waiting) -> None:
        try:
            self._queue.remove(conn)
        except ValueError:
            pass

    def _schedule(self) -> None:
        if self._wakeup is None and self._queue:
            delay = self._bucket.wait_time()
            self._wakeup = asyncio.get_running_loop().call_later(delay, self._drain)

    def _drain(self) -> None:
        self._wakeup = None
        while self._queue and self._bucket.try_take():
            self.started += 1
            self._queue.popleft().begin_tls()
        self._schedule()

    def close(self) -> None:
        if self._wakeup is not None:
            self._wakeup.cancel()
            self._wakeup = None
        self._queue.clear()
