"""What the agent tells trainers about itself, and what it learns back.

* the discovery record: a small JSON file at a fixed place (``tna_client.discovery``) naming the
  request file, so a trainer finds the agent without being told, whatever ``--state-dir`` says;
* the identity every request carries (boot id, pid and start time, pid namespace, a per-run id), so
  a trainer can tell a live request from one left behind by an agent that is gone;
* the notes trainers leave beside the request file (``trainer-<pid>.json``) when they found it, for
  status and the drill report.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import structlog
from tna_client.discovery import ROOT_DISCOVERY_FILE, discovery_file_for
from tna_client.node import identity as process_identity
from tna_client.node import pid_namespace, start_ticks

from agent.checkpoint.seen import clean_seen
from agent.core.fsread import read_optional
from agent.core.statefile import write_atomic

log = structlog.get_logger("checkpoint")

MAX_NOTES = 256  # trainer notes read per look; a directory flooded by a runaway job stays cheap
NOTE_PREFIX = "trainer-"


def agent_identity(procfs: str = "/proc") -> dict[str, Any]:
    return {**process_identity(procfs), "instance": uuid.uuid4().hex}


def discovery_path(
    setting: str, euid: int | None = None, root_file: str = ROOT_DISCOVERY_FILE
) -> Path | None:
    """``[trainer] discovery_file``: "" = the fixed place for our uid, "none" = nowhere.

    The packaged unit runs as its own user, yet trainers look at ``/run/training-node-agent`` first,
    and the per-user place under /tmp would be the unit's PrivateTmp, which nobody else sees. So
    where that directory is ours and closed to others (the unit's RuntimeDirectory), it is used."""
    if setting == "none":
        return None
    if setting:
        return Path(setting)
    euid = os.geteuid() if euid is None else euid
    root = Path(root_file)
    with contextlib.suppress(OSError):
        st = root.parent.stat()
        if st.st_uid == euid and not st.st_mode & 0o022:
            return root
    return Path(discovery_file_for(euid))


def _own_dir(directory: Path) -> None:
    """Create the record's directory, or make sure the one there is ours and closed to others: the
    client trusts a record only in such a directory (a stranger could otherwise redirect acks)."""
    if not directory.exists():
        directory.mkdir(mode=0o755, parents=True)
    st = directory.stat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise PermissionError(
            f"{directory} belongs to uid {st.st_uid} or is writable by others; trainers would not trust it"
        )


def publish(
    path: Path, request_file: Path, ident: dict[str, Any], signal_name: str, step_report: float = 5.0
) -> None:
    _own_dir(path.parent)
    record = {
        "version": 1,
        "kind": "training-node-agent",
        "request_file": str(request_file),
        "ack_dir": str(request_file.parent),
        "signal": signal_name,
        "step_report": step_report,  # how often tna_client hands over its step figures, in seconds
        "agent": ident,
    }
    write_atomic(path, (json.dumps(record, indent=1) + "\n").encode(), 0o644)


def unpublish(path: Path, ident: dict[str, Any]) -> None:
    """Remove the record if it is still ours (a newer agent may have replaced it)."""
    with contextlib.suppress(OSError, ValueError):
        record = json.loads(path.read_text())
        if record.get("agent", {}).get("instance") == ident["instance"]:
            path.unlink()


def trainer_notes(directory: Path, procfs: str = "/proc") -> list[dict[str, Any]]:
    """The trainers that found the request file and are still running, by pid; notes of processes
    that are gone are removed."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith(NOTE_PREFIX) and n.endswith(".json"))
    except OSError:
        return []
    out = []
    own_ns = pid_namespace(procfs)
    for name in names[:MAX_NOTES]:
        text = read_optional(directory / name, 4096)
        try:
            note = json.loads(text or "")
        except ValueError:
            continue
        pid = note.get("pid") if isinstance(note, dict) else None
        if not isinstance(pid, int) or isinstance(pid, bool):
            continue
        ns = note.get("pidns")
        foreign = isinstance(ns, int) and ns != own_ns  # a trainer in a container: its pid is not ours
        if not foreign and start_ticks(pid, procfs) is None:
            with contextlib.suppress(OSError):
                (directory / name).unlink()
            continue
        rank = note.get("rank")
        entry = {"pid": pid, "rank": rank if isinstance(rank, int) else None, "since": note.get("time")}
        seen = note.get("seen")
        how = clean_seen(seen.get("via"), seen.get("at")) if isinstance(seen, dict) else None
        if how is not None and isinstance(seen.get("event_id"), str):  # it took a request: which, how
            entry["seen"] = {"event_id": seen["event_id"][:200], **how}
        out.append(entry)
    return out


def trainers_line(request_file: Path, trainers: list[dict[str, Any]]) -> str:
    if not trainers:
        return f"request file {request_file}: no trainer has found it yet"
    who = ", ".join(
        f"pid {t['pid']}" + (f" (rank {t['rank']})" if t["rank"] is not None else "") for t in trainers
    )
    return f"request file {request_file}: found by {who}"


def publish_logged(
    discovery_file: Path,
    request_file: Path,
    identity: dict[str, Any],
    signal_name: str,
    step_report: float = 5.0,
) -> None:
    """:func:`publish`, saying where trainers look, or why they cannot find the agent that way."""
    try:
        publish(discovery_file, request_file, identity, signal_name, step_report)
        log.info("trainers find this agent through", discovery_file=str(discovery_file))
    except OSError as e:
        log.error(
            "cannot publish the discovery record; trainers need $TNA_CHECKPOINT_REQUEST_FILE",
            discovery_file=str(discovery_file),
            request_file=str(request_file),
            error=str(e),
        )
