"""Files replaced whole (state under ``state_dir``, request files, fake device state): written to a
temp file, fsynced, renamed; read back with a damaged one set aside (``load_state``). The agent's own
JSON state (the classifier's baselines, the goodput ledger, the report's timeline) goes through
``save_state`` and ``load_json``: one mode, one wording of what was set aside."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

T = TypeVar("T")


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


def load_state(
    path: Path,
    parse: Callable[[bytes], T],
    log: Any,
    *,
    damaged: str,
    unreadable: str | None = None,
    read: Callable[[Path], bytes] = Path.read_bytes,
    level: Literal["warning", "error"] = "warning",
    key: str = "path",
) -> T | None:
    """What ``parse`` makes of the file, or ``None``: when it is missing (silently); when it cannot
    be read (``unreadable`` logged with the reason, the file left where it is); when ``parse`` (or
    ``read``) raises ``ValueError`` or ``TypeError``, the file is damaged: set aside and ``damaged``
    logged with where it was kept. ``unreadable=None``: a file that cannot be read is damaged too
    (the trainer's untrusted reports). ``key`` names the file's field in the log lines."""
    try:
        value = parse(read(path))
    except FileNotFoundError:
        return None
    except OSError as e:
        if unreadable is not None:
            getattr(log, level)(unreadable, **{key: str(path)}, error=e.strerror)
            return None
        error = e.strerror or str(e)
    except (ValueError, TypeError) as e:  # UnicodeDecodeError and JSONDecodeError among them
        error = str(e)[:200]
    else:
        return value
    aside = set_aside(path)
    getattr(log, level)(damaged, **{key: str(path)}, kept_as=str(aside), error=error)
    return None


def save_state(path: Path, text: str) -> None:
    """One of the agent's own state files, written whole; the agent's user alone reads it (it names
    jobs, hosts and what they cost)."""
    write_atomic(path, text.encode(), 0o600)


def load_json(path: Path, from_json: Callable[[Any], T], log: Any, *, what: str, instead: str) -> T | None:
    """``load_state`` of a JSON state file the agent wrote: ``from_json`` of what it holds (raising
    ``ValueError`` or ``TypeError`` on anything but the shape written), or None. The log lines name
    ``what`` the file is and what is done ``instead`` ("starting empty")."""
    return load_state(
        path,
        lambda raw: from_json(json.loads(raw)),
        log,
        unreadable=f"cannot read {what}; {instead}",
        damaged=f"{what} damaged; set aside and {instead}",
    )
