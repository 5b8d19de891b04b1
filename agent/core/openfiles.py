"""Small kernel files kept open between ticks and re-read with one pread() at offset 0.

/proc/<pid>/stat, /proc/<pid>/io and sysfs attributes are generated afresh on every read from
offset 0, so an open descriptor serves every tick: one system call instead of open, read and close,
which also means one release of the GIL instead of three while other collectors' threads wait for
it. A /proc/<pid> file stays bound to the process it was opened for: once that process is gone the
read fails (ESRCH), even if the pid has been given to another one, and the file is opened again.

Only files on procfs and sysfs are read this way without a second look. A plain file (a fixture
tree in tests and benchmarks) does not go away when it is deleted or replaced, so before each read
its descriptor is checked with fstat() and a file no longer linked is opened again by name.

Descriptors not read since the last :meth:`sweep` are closed then, and there are never more than
``limit``.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from agent.core.fsread import ATTR_BYTES

_KERNEL_FS = frozenset({0x9FA0, 0x62656572})  # PROC_SUPER_MAGIC, SYSFS_MAGIC
_fstatfs: Any
try:
    _fstatfs = ctypes.CDLL(None, use_errno=True).fstatfs
except (OSError, AttributeError):  # not glibc/musl Linux: treat everything as a plain file
    _fstatfs = None


def regenerated(fd: int) -> bool:
    """Whether ``fd`` is on procfs or sysfs, whose files are generated anew by each read."""
    if _fstatfs is None:
        return False
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type comes first
    if _fstatfs(fd, buf) != 0:
        return False
    return (ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF) in _KERNEL_FS


class OpenFiles:
    def __init__(self, limit: int = 512) -> None:
        self.limit = limit
        self._fds: dict[str, int] = {}
        self._plain: set[str] = set()  # paths whose descriptor is a plain file
        self._used: set[str] = set()

    def read(self, path: str) -> str | None:
        """The file's text (at most ``ATTR_BYTES``), or None if it is gone or unreadable."""
        self._used.add(path)
        fd = self._fds.get(path)
        if fd is not None:
            try:
                if path in self._plain and os.fstat(fd).st_nlink == 0:
                    raise FileNotFoundError(path)
                return os.pread(fd, ATTR_BYTES, 0).decode("utf-8", "replace")
            except OSError:
                self._close(path)  # the process exited, the device or file went: open afresh
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            data = os.pread(fd, ATTR_BYTES, 0)
        except OSError:
            os.close(fd)
            return None
        if len(self._fds) >= self.limit:
            self._close(next(iter(self._fds)))  # the oldest
        self._fds[path] = fd
        if not regenerated(fd):
            self._plain.add(path)
        return data.decode("utf-8", "replace")

    def sweep(self) -> None:
        """Close what was not read since the last sweep (processes left the tree, ports went)."""
        for path in self._fds.keys() - self._used:
            self._close(path)
        self._used.clear()

    def close(self) -> None:
        for path in list(self._fds):
            self._close(path)
        self._used.clear()

    def __len__(self) -> int:
        return len(self._fds)

    def _close(self, path: str) -> None:
        fd = self._fds.pop(path)
        self._plain.discard(path)
        try:
            os.close(fd)
        except OSError:
            pass
