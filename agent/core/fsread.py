"""Reading kernel files for collectors: bounded in size, so a garbled or huge file cannot eat memory."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

MAX_BYTES = 16 * 1024 * 1024  # mountstats with hundreds of mounts stays far below this
CHUNK = 64 * 1024
ATTR_BYTES = 8192  # a sysfs attribute is at most a page; /proc/<pid>/stat, io, status fit too


def read_text(path: str | Path, limit: int = MAX_BYTES) -> str:
    """Text of a /proc or /sys file, cut at ``limit`` bytes, undecodable bytes replaced.

    Read in 64 KiB pieces: asking for ``limit`` bytes at once allocates that much for every file,
    which costs more than reading a small one."""
    return read_stamped(path, limit)[0]


def read_stamped(path: str | Path, limit: int = MAX_BYTES) -> tuple[str, float]:
    """:func:`read_text` and the monotonic time of the read: the moment a counter file's values
    belong to. Taken after the open, the slow part, and right before the kernel renders the text."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        at = time.monotonic()
        parts = []
        left = limit
        while left > 0:
            data = os.read(fd, min(CHUNK, left))
            if not data:
                break
            parts.append(data)
            left -= len(data)
    finally:
        os.close(fd)
    return b"".join(parts).decode("utf-8", "replace"), at


def read_optional(path: str | Path, limit: int = MAX_BYTES) -> str | None:
    """Like :func:`read_text`, but ``None`` when the file does not exist or cannot be read."""
    try:
        return read_text(path, limit)
    except OSError:
        return None


def read_attr(path: str) -> str | None:
    """A small file in one read() (sysfs attributes, /proc/<pid>/stat): what collectors read many
    times per tick. ``None`` when it does not exist or cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, ATTR_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def read_optional_stamped(path: str | Path, limit: int = MAX_BYTES) -> tuple[str | None, float | None]:
    """Like :func:`read_stamped`, but ``(None, None)`` when the file does not exist or cannot be read."""
    try:
        return read_stamped(path, limit)
    except OSError:
        return None, None


def read_trainer_file(path: str | Path, limit: int) -> bytes:
    """A small file another process wrote into a shared folder (a trainer's note or step report):
    never through a symlink, never a FIFO or device (which could block or stream forever), at most
    ``limit`` bytes, or a ValueError saying which rule it broke."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError(f"larger than {limit} bytes")
    return data
