"""Durable files: JSON written atomically (a temp name starting with '.', fsync, rename, fsync of
the directory) and a checkpoint flushed to disk, files and directories, before it is acknowledged."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from typing import Any


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(directory: str, name: str, data: Any, mode: int = 0o644, durable: bool = True) -> str:
    """``directory/name`` holds ``data`` whole or not at all; readers skip names starting with '.'.
    ``durable=False`` skips the fsyncs: a report rewritten every few seconds (the step figures) must
    not become the trainer's disk flushes, and losing the last one in a crash costs nothing."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(data).encode())
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        path = os.path.join(directory, name)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(directory)  # the rename itself must survive a crash too
    return path


def fsync_tree(path: str) -> int:
    """Flush a checkpoint to stable storage: every file under ``path`` (or ``path`` itself), every
    directory bottom-up, then the directory holding it, so that neither data nor names are lost in a
    crash. Any process may do it for files another process wrote (fsync flushes the file, not the
    descriptor's writes). Returns how many files were flushed; raises OSError."""
    path = os.path.abspath(path)
    count = 0
    if os.path.isdir(path):
        for dirpath, _dirs, files in os.walk(path, topdown=False):
            for name in files:
                full = os.path.join(dirpath, name)
                if os.path.islink(full):
                    continue
                fd = os.open(full, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                count += 1
            fsync_dir(dirpath)
    else:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        count = 1
    fsync_dir(os.path.dirname(path))
    return count
