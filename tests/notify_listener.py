"""A stand-in for systemd's notify socket: a real AF_UNIX datagram listener that records sd_notify
messages with their arrival times, and can stop reading (a hung supervisor) and start again."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path


class NotifyListener:
    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.messages: list[tuple[float, str]] = []
        self._stop = False
        self._reading = threading.Event()
        self._reading.set()
        self._idle = threading.Event()  # set while the thread is out of recv() because of pause()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def _loop(self) -> None:
        while not self._stop:
            if not self._reading.is_set():
                self._idle.set()
                self._reading.wait(0.2)
                continue
            self._idle.clear()
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self._record(data)

    def _record(self, data: bytes) -> None:
        for line in data.decode().splitlines():
            self.messages.append((time.monotonic(), line))

    def pause(self) -> None:
        """Stop reading; returns once no recv() is under way, so the queue only fills from here."""
        self._idle.clear()
        self._reading.clear()
        assert self._idle.wait(5), "the listener thread did not pause"

    def resume(self) -> int:
        """Take what queued up while paused (returns how many datagrams), then read as before:
        whatever arrives after this returns was sent after the listener read again."""
        backlog = 0
        self.sock.setblocking(False)
        try:
            while True:
                try:
                    self._record(self.sock.recv(4096))
                except BlockingIOError:
                    break
                backlog += 1
        finally:
            self.sock.settimeout(0.2)
        self._reading.set()
        return backlog

    def lines(self, prefix: str) -> list[tuple[float, str]]:
        return [(t, m) for t, m in self.messages if m.startswith(prefix)]

    def close(self) -> None:
        self._stop = True
        self._reading.set()
        self.sock.close()
