"""RFC 3339 times as the trainer's files write them (``tna_client.files.rfc3339``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def parse_time(value: Any) -> float:
    """An RFC 3339 time with an explicit offset (``Z`` or ``+00:00``) -> unix seconds."""
    if not isinstance(value, str) or len(value) > 64:
        raise ValueError("time must be an RFC 3339 string like 2025-03-14T06:11:00Z")
    try:
        dt = datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"time is not RFC 3339: {value!r}") from None
    if dt.tzinfo is None:
        raise ValueError(f"time has no UTC offset: {value!r}")
    return dt.astimezone(UTC).timestamp()
