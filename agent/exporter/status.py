"""The JSON summary of a snapshot served by /api/v1/status and the control socket (each registered
source adds its own keys, from its ``status.py``), and the network view of the daemon's status.

The control socket (local, mode 0660) answers the full status. The TCP port answers
:func:`tcp_view` of it: an allowlist, so a field that a new part adds stays off the network until
it is listed here (docs/security.md lists the same fields; a test keeps the two equal).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from agent.core.projection import Each, Spec, project
from agent.core.projection import fields as _fields
from agent.snapshot import NodeSnapshot
from agent.sources import registry


def summarize(snap: NodeSnapshot) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seq": snap.seq,
        "timestamp": snap.timestamp,
        "collectors": {name: asdict(st) for name, st in sorted(snap.collectors.items())},
    }
    for source in registry.sources():
        part = snap.parts.get(source.name)
        if part is not None and source.status is not None:
            rates = snap.rates.of(source.rates_type) if source.rates_type is not None else None
            out.update(source.status(part, rates))
    return out


# --- the network view ------------------------------------------------------------------------------


_EPISODE = _fields("event_id", "kind", "provider", "phase", "drill", "deadline", "duration_seconds")


def _source_views() -> dict[str, Spec]:
    """Each source lists which of its status keys the network may read (its ``tcp_view``)."""
    out: dict[str, Spec] = {}
    for source in registry.sources():
        out.update(source.tcp_view)
    return out


# What a network neighbour may read. Left out on purpose: the config path, task errors, collector
# errors, GPU process PIDs, training processes' PIDs and names, NFS exports, everything about
# checkpoint discovery (command-line patterns, pid files, cgroups), the request file, the
# checkpoint targets and acks (paths), the metadata endpoint, token state and raw notices, alert
# channels' URLs, the spool path, the recent events, and every human-readable "lines" list (they
# quote all of the above).
_TCP_VIEW: dict[str, Spec] = {
    **_fields("version", "uptime_seconds", "healthy", "health_reason", "reloads"),
    "tasks": Each(_fields("running", "restarts")),
    "http": _fields("scheme"),
    "snapshot": {
        **_fields("seq", "timestamp"),
        "collectors": Each(_fields("success", "absent", "duration_seconds")),
    },
    "classifier": _fields(
        "verdict",
        "sub_reason",
        "since",
        "since_seconds",
        "reasons",
        "hint",
        "health",
        "scores",
        "vote",
        "held",
        "candidate",
        "candidate_count",
        "changes_total",
        "evaluations",
        "window_seconds",
        "window_samples",
        "published",
    ),
    "preemption": {
        **_fields("provider", "selected_by", "enabled", "instance", "requests"),
        "active": Each(
            _fields(
                "event_id",
                "provider",
                "kind",
                "deadline",
                "received_at",
                "seconds_remaining_at_receipt",
                "remaining_seconds",
            )
        ),
    },
    "checkpoint": {
        **_fields("signal", "dry_run"),
        "targets": Each(_fields("source", "handler")),
        "active": Each(_EPISODE),
        "recent": Each(_EPISODE),
    },
    "gpu-health": _fields("lost", "throttled", "degraded", "events"),
    "alerts": {
        **_fields("active", "held"),
        "channels": Each(_fields("type", "state", "queued", "sent", "messages", "failed", "dropped")),
    },
}


def tcp_spec() -> dict[str, Spec]:
    """The whole allowlist: the parts' fields above and each registered source's (its ``tcp_view``)."""
    snapshot = _TCP_VIEW["snapshot"]
    assert isinstance(snapshot, dict)
    return {**_TCP_VIEW, "snapshot": {**snapshot, **_source_views()}}


def tcp_view(full: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = project(full, tcp_spec())
    return out
