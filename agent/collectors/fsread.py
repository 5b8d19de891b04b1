"""Reading kernel files for collectors: bounded in size, so a garbled or huge file cannot eat memory."""

from __future__ import annotations

from pathlib import Path

MAX_BYTES = 16 * 1024 * 1024  # mountstats with hundreds of mounts stays far below this


def read_text(path: str | Path, limit: int = MAX_BYTES) -> str:
    """Text of a /proc or /sys file, cut at ``limit`` bytes, undecodable bytes replaced."""
    with open(path, "rb") as f:
        data = f.read(limit)
    return data.decode("utf-8", "replace")


def read_optional(path: str | Path, limit: int = MAX_BYTES) -> str | None:
    """Like :func:`read_text`, but ``None`` when the file does not exist or cannot be read."""
    try:
        return read_text(path, limit)
    except OSError:
        return None
