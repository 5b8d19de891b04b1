"""systemd's notify protocol spoken directly on $NOTIFY_SOCKET (no libsystemd).

Every send is non-blocking: a listener that stops reading (a container runtime's notify proxy, a
hung supervisor) fills its datagram queue (net.unix.max_dgram_qlen, 10 by default), and a blocking
sendto would then stop the event loop: no ticks, no scrapes, no checkpoint signals. A datagram that
cannot go now is dropped and counted; the next ping or status says the same thing afresh."""

from __future__ import annotations

import os
import socket
import time

import structlog

log = structlog.get_logger("sdnotify")


class Notifier:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        addr = env.get("NOTIFY_SOCKET", "")
        self._addr: str | None = None
        if addr.startswith("@"):
            self._addr = "\0" + addr[1:]  # abstract namespace
        elif addr.startswith("/"):
            self._addr = addr
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        self.watchdog_seconds: float | None = None
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.watchdog_seconds = int(usec) / 1e6
        self._sock: socket.socket | None = None
        self.dropped = 0  # datagrams that could not be sent, over the process's life
        self._burst = 0  # drops since the last datagram that went: one log line per burst

    @property
    def enabled(self) -> bool:
        return self._addr is not None

    def send(self, *lines: str) -> bool:
        if self._addr is None:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(
                    socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
                )
            self._sock.sendto("\n".join(lines).encode(), socket.MSG_DONTWAIT, self._addr)
        except OSError as e:  # queue full (EAGAIN), listener gone (ECONNREFUSED, ENOENT)
            self._drop(e, lines[0])
            return False
        if self._burst:
            log.info("notify socket takes datagrams again", dropped_in_burst=self._burst)
            self._burst = 0
        return True

    def _drop(self, error: OSError, first_line: str) -> None:
        self.dropped += 1
        self._burst += 1
        if self._burst == 1:
            log.warning(
                "notify socket not taking datagrams; dropping them until it does",
                error=error.strerror or type(error).__name__,
                first_dropped=first_line,
            )

    def ready(self, status: str = "") -> None:
        self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def stopping(self) -> None:
        self.send("STOPPING=1")

    def reloading(self) -> None:
        # systemd 253+ (Type=notify-reload) wants the time the reload began with it; older ones ignore it
        self.send("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
