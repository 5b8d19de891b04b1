"""Text from outside (a scheduler's reason, a command's stderr) made fit for one log or alert line."""

from __future__ import annotations

import unicodedata


def one_line(text: str, limit: int) -> str:
    """One line, no control characters, at most ``limit`` characters."""
    flat = "".join(" " if unicodedata.category(ch).startswith("C") else ch for ch in text)
    flat = " ".join(flat.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
