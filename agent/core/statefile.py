"""Files replaced whole (state under ``state_dir``, request files, fake device state): written to a
temp file, fsynced, renamed."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """Readers see the old file or the new one, never half of one; survives a crash (fsync).

    ``durable=False`` skips the fsyncs: for a file rewritten several times a second whose readers
    only need it whole (the lab's fake GPU state, while the agent measures the workload's I/O)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not durable:
        return
    with contextlib.suppress(OSError):  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def set_aside(path: Path, suffix: str = ".bad") -> Path:
    """Rename a damaged file out of the way (kept for a post-mortem, never deleted); returns where it
    is now (``path`` itself when it cannot be moved)."""
    aside = path.with_name(path.name + suffix)
    try:
        os.replace(path, aside)
    except OSError:
        return path
    return aside
