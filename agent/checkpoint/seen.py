"""Who saw a checkpoint request, by which channel and when, for the episode's record and the report:
from the ack (rank 0, which saves) and the notes every trainer leaves beside the request file
(``trainer-<pid>.json``, which ``tna_client`` rewrites once it has taken a request). Pure.

What a trainer had found *before* the request went out (``TrainerReach.trainers``) is a different fact;
once a trainer is known to have seen the request, this line replaces it."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

MAX_VIA_CHARS = 40
FILE_VIA = "file"  # tna_client's word for "read it in the request file, no signal came first"


def clean_seen(via: Any, at: Any) -> dict[str, Any] | None:
    """A trainer's "how and when I learnt of it", typed (it is untrusted input), or None."""
    if not isinstance(via, str) or not via or isinstance(at, bool) or not isinstance(at, int | float):
        return None
    return {"via": via[:MAX_VIA_CHARS], "at": float(at)}


def seen_line(
    event_id: str,
    requested_at: float | None,
    ack: Mapping[str, Any] | None,
    notes: Iterable[Mapping[str, Any]],
) -> str | None:
    """One line: each trainer known to have seen the request, rank 0's ack first. None when no
    trainer is known to have (no ack, no note naming this event)."""
    parts: list[str] = []
    acker = ack.get("pid") if ack else None
    if ack is not None:
        parts.append(_ack_part(ack, requested_at))
    for note in notes:
        seen = note.get("seen")
        if note.get("pid") == acker or not isinstance(seen, Mapping) or seen.get("event_id") != event_id:
            continue
        how = clean_seen(seen.get("via"), seen.get("at"))
        if how is not None:
            parts.append(f"{_who(note)} saw it {_how(how, requested_at)}")
    return "; ".join(parts) or None


def _ack_part(ack: Mapping[str, Any], requested_at: float | None) -> str:
    who = _who(ack) if isinstance(ack.get("pid"), int) else "a trainer"
    acked = f"acked via {ack['via']}" + _after(ack.get("at"), requested_at, "after the request")
    how = clean_seen(ack.get("seen_via"), ack.get("seen_at"))
    if how is None:  # a client older than the "seen" fields, or an ack by hand
        return f"{who} {acked} (when it saw the request it did not say)"
    return f"{who} saw the request {_how(how, requested_at)}, and {acked}"


def _who(rec: Mapping[str, Any]) -> str:
    rank = rec.get("rank")
    return f"pid {rec.get('pid')}" + (f" (rank {rank})" if isinstance(rank, int) else "")


def _how(seen: Mapping[str, Any], requested_at: float | None) -> str:
    via = "in the request file" if seen["via"] == FILE_VIA else f"by {seen['via']}"
    at = time.strftime("%H:%M:%SZ", time.gmtime(seen["at"]))
    after = _after(seen["at"], requested_at, "after it was sent")
    return f"{via} at {at}" + (f",{after}" if after else "")


def _after(at: Any, requested_at: float | None, words: str) -> str:
    if requested_at is None or isinstance(at, bool) or not isinstance(at, int | float):
        return ""
    delta = at - requested_at
    # another clock's idea of "now" (a trainer in a VM, a skewed container) says nothing useful
    return f" {max(delta, 0.0):.1f} s {words}" if -1.0 <= delta <= 86400 else ""
