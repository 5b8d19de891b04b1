"""systemd's notify protocol spoken directly on $NOTIFY_SOCKET (no libsystemd)."""

from __future__ import annotations

import os
import socket
import time


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

    @property
    def enabled(self) -> bool:
        return self._addr is not None

    def send(self, *lines: str) -> bool:
        if self._addr is None:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto("\n".join(lines).encode(), self._addr)
            return True
        except OSError:
            return False  # systemd gone or socket unwritable: nothing useful to do about it

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
