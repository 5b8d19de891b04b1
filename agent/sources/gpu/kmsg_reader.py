"""The kernel log read as it grows: ``/dev/kmsg`` opened non-blocking, one record per read.

The records already in the ring buffer when the process first opens it are history: read, shown,
never raised, so a restart does not alert an old Xid again. A reload opens the log again; the
:class:`LogPosition` it is handed lives as long as the process, so the records that came while it
reloaded are read as new and those handled before are not read twice.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field

from agent.sources.gpu.kmsg import KmsgRecord, MalformedRecord, parse_record

RECORD_MAX = 8192  # a read into a buffer smaller than its record fails with EINVAL
READS_MAX = 10_000  # per drain: a kernel logging without pause must not hold the event loop


@dataclass
class LogPosition:
    """The newest record this process has handled (None until it first opened the log)."""

    seq: int | None = None


@dataclass
class Drained:
    history: list[KmsgRecord] = field(default_factory=list)  # there before this process first looked
    new: list[KmsgRecord] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)  # the parser's errors
    lost: int = 0  # times the kernel overwrote records before they were read (EPIPE)
    ended: bool = False  # the file gave end-of-file: not a kernel log (a container's /dev/null)


class KernelLog:
    def __init__(self, path: str, position: LogPosition) -> None:
        self.path = path
        self._position = position
        self._fd: int | None = None
        self._first = position.seq is None  # this open reads the history

    def open(self) -> int:
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def drain(self) -> Drained:
        """Every record readable now (bounded by READS_MAX)."""
        assert self._fd is not None, "open() first"
        out = Drained()
        for _ in range(READS_MAX):
            try:
                raw = os.read(self._fd, RECORD_MAX)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # overwritten under us: the next read goes on from the oldest
                    out.lost += 1
                    continue
                raise
            if not raw:
                out.ended = True
                break
            try:
                rec = parse_record(raw)
            except MalformedRecord as e:
                out.malformed.append(str(e))
                continue
            self._sort(rec, out)
        if self._first:
            self._first = False
            if self._position.seq is None:
                self._position.seq = -1  # an empty log: everything from now on is new
        return out

    def _sort(self, rec: KmsgRecord, out: Drained) -> None:
        if self._first:
            out.history.append(rec)
        elif self._position.seq is not None and rec.seq <= self._position.seq:
            return  # handled before a reload opened the log again
        else:
            out.new.append(rec)
        if self._position.seq is None or rec.seq > self._position.seq:
            self._position.seq = rec.seq
