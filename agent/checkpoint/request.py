"""The file and HTTP channels: the request JSON the trainer reads, and the ack file it writes back.

The request file is the channel every rank can see, whatever user it runs as and whether or not it
has a signal handler; the signal only makes the trainer look sooner.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from agent.checkpoint.episodelog import Episode
from agent.checkpoint.seen import clean_seen
from agent.core.statefile import write_atomic

REQUEST_NAME = "request.json"
MAX_ACK_BYTES = 64 * 1024


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def ack_path(directory: Path, event_id: str) -> Path:
    # event ids come from the cloud: keep the file name tame and still unique
    tame = re.sub(r"[^A-Za-z0-9._-]", "_", event_id)[:64]
    digest = hashlib.sha256(event_id.encode()).hexdigest()[:8]
    return directory / f"ack-{tame}-{digest}.json"


def prepare_dir(directory: Path) -> None:
    """A request directory the agent creates is world-writable with the sticky bit (like /tmp), so
    that a trainer running as any user can drop its ack there. One that exists is left as it is."""
    if directory.is_dir():
        return
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o1777)


def request_payload(
    ep: Episode, signal_name: str, ack: Path, state: str, agent: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``agent``: who writes it (``publish.agent_identity``), so a trainer can tell a live request from
    one left behind by an agent that is gone, or written on another node or before a reboot."""
    now = time.time()
    return {
        "version": 2,
        "state": state,  # requested | canceled | completed | missed
        "event_id": ep.event_id,
        "kind": ep.kind,
        "provider": ep.provider,
        "deadline": iso(ep.deadline),
        "deadline_unix": ep.deadline,
        "seconds_remaining": round(ep.deadline - now, 3),
        "requested_at": iso(ep.requested_at or now),
        "signal": signal_name,
        "ack_path": str(ack),
        "drill": ep.drill,
        "agent": agent or {},
    }


def write_request(path: Path, payload: dict[str, Any]) -> None:
    write_atomic(path, (json.dumps(payload, indent=1) + "\n").encode(), 0o644)


def read_ack(path: Path, event_id: str) -> dict[str, Any] | None:
    """The trainer's ack for ``event_id``, or None while there is none. An ack for another event or a
    malformed file raises ``ValueError`` (the caller logs it once and keeps waiting)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_ACK_BYTES)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
    try:
        data = json.loads(raw)
    except ValueError:
        raise ValueError(f"{path} is not JSON") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    if data.get("event_id") not in (None, event_id):
        raise ValueError(f"{path} acknowledges event {data.get('event_id')!r}, not {event_id!r}")
    return clean_ack(data, via="file")


def clean_ack(data: dict[str, Any], via: str) -> dict[str, Any]:
    """Only the known fields, typed; a trainer's ack is untrusted input."""
    out: dict[str, Any] = {"via": via, "at": time.time()}
    step = data.get("step")
    if isinstance(step, int) and not isinstance(step, bool):
        out["step"] = step
    for key in ("path", "note"):
        if isinstance(data.get(key), str):
            out[key] = data[key][:1000]
    for key in ("rank", "pid"):
        if isinstance(data.get(key), int) and not isinstance(data.get(key), bool):
            out[key] = data[key]
    seen = clean_seen(data.get("seen_via"), data.get("seen_at"))
    if seen is not None:  # how and when the trainer learnt of the request (older clients do not say)
        out["seen_via"], out["seen_at"] = seen["via"], seen["at"]
    return out


async def post_request(url: str, payload: dict[str, Any], timeout: float) -> str:
    """POST the request to a local trainer endpoint; returns the status code or the error, one line."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s,
            s.post(url, json=payload) as resp,
        ):
            return str(resp.status)
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        return f"error: {type(e).__name__}: {e}"[:200]
