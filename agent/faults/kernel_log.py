"""The driver's Xid lines from the kernel log, as they are written: the Xid source that needs no NVML.

A driver whose calls hang leaves the GPU collector timed out, while the kernel log already says
``NVRM: Xid (PCI:0000:18:00): 79, ... GPU has fallen off the bus``. The log is watched on the event
loop (``/dev/kmsg`` polls readable when a record comes); each new Xid line goes to ``on_xid``, the
lines already there when the agent started are kept as history.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

import structlog

from agent.sources.gpu.kmsg import KernelXid, parse_xid
from agent.sources.gpu.kmsg_reader import Drained, KernelLog, LogPosition

log = structlog.get_logger("kernel-log")

HISTORY_SHOWN = 8  # the newest Xid lines of the history, in status


class KernelXidWatch:
    def __init__(self, path: str, position: LogPosition, on_xid: Callable[[KernelXid], None]) -> None:
        self._log = KernelLog(path, position)
        self._on_xid = on_xid
        self.error: str | None = None
        self.ended = False
        self.history: deque[str] = deque(maxlen=HISTORY_SHOWN)
        self.history_xids = 0
        self.xids = 0
        self.malformed = 0
        self.lost = 0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            fd = self._log.open()
        except OSError as e:
            # no CAP_SYSLOG under kernel.dmesg_restrict=1, or no /dev/kmsg: NVML's events still count
            self.error = f"cannot read {self._log.path}: {e.strerror or e}"
            log.warning("kernel log not read; Xids come from NVML only", reason=self.error)
            await asyncio.Event().wait()
            return
        done = asyncio.Event()

        def readable() -> None:
            try:
                self._take(self._log.drain())
            except OSError as e:
                self.error = f"reading {self._log.path}: {e.strerror or e}"
                log.error("kernel log read failed; Xids come from NVML only", reason=self.error)
                done.set()
                return
            if self.ended:
                done.set()

        try:
            readable()  # the history, before the first wake
            if not done.is_set():
                loop.add_reader(fd, readable)
            await done.wait()
        finally:
            loop.remove_reader(fd)
            self._log.close()
        await asyncio.Event().wait()  # the log is gone; the part lives on

    def _take(self, d: Drained) -> None:
        for rec in d.history:
            xid = parse_xid(rec.message)
            if xid is not None:
                self.history_xids += 1
                self.history.append(xid.text)
        for rec in d.new:
            xid = parse_xid(rec.message)
            if xid is not None:
                self.xids += 1
                self._on_xid(xid)
        for problem in d.malformed:
            log.warning("kernel log record not understood; skipped", problem=problem)
        self.malformed += len(d.malformed)
        if d.lost:
            log.warning("kernel log overwrote records before they were read", times=d.lost)
        self.lost += d.lost
        if d.ended:
            self.ended = True
            log.warning("kernel log ended: not a kernel log; Xids come from NVML only", path=self._log.path)

    def status(self) -> dict[str, object]:
        return {
            "path": self._log.path,
            "error": self.error,
            "ended": self.ended,
            "xids": self.xids,
            "history_xids": self.history_xids,
            "history": list(self.history),
            "malformed": self.malformed,
            "lost": self.lost,
        }
