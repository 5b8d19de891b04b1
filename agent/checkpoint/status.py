"""The checkpoint action's status section: targets, the request file, open and recent episodes."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agent.checkpoint.episodelog import Episode
from agent.checkpoint.publish import trainers_line
from agent.core.vocabulary import EpisodeState, HandlerState

if TYPE_CHECKING:
    from agent.checkpoint.component import CheckpointComponent

_READY_LINE = {HandlerState.HANDLER: "handler ready", HandlerState.HARMLESS: "signal is harmless"}


def status(c: CheckpointComponent) -> dict[str, Any]:
    now = time.time()
    tcfg = c.tcfg
    targets: list[dict[str, Any]] = [
        {
            "pid": t.pid,
            "comm": t.comm,
            "source": t.source,
            "handler": c.watch.handlers.get(t.pid, HandlerState.UNKNOWN),
        }
        for t in c.watch.found.targets
    ]
    eps = sorted(c.episode_log.episodes.values(), key=lambda e: e.received_at)
    active = [summary(e, now) for e in eps if e.open]
    recent = [summary(e, now) for e in eps if not e.open][-5:]
    lines = [
        f"signal {tcfg.signal}, discover {', '.join(tcfg.discover)}"
        + ("  [DRY RUN: nothing is sent]" if tcfg.dry_run else "")
    ]
    if targets:
        for t in targets:
            ok = _READY_LINE.get(t["handler"])
            hint = ok or f"{t['handler'].upper()}: will get the request file only"
            lines.append(f"target pid {t['pid']} ({t['comm']}) via {t['source']}: {hint}")
    else:
        lines.append(
            "no training process found"
            + (f" ({'; '.join(c.watch.found.problems)})" if c.watch.found.problems else "")
        )
    lines.append(trainers_line(c.request_file, c.watch.trainers))
    if c.discovery_file is not None:
        lines.append(f"trainers find it through {c.discovery_file} (or $TNA_CHECKPOINT_REQUEST_FILE)")
    else:
        lines.append(f"no discovery record: set TNA_CHECKPOINT_REQUEST_FILE={c.request_file}")
    lines += [f"notice {a['kind']} ({a['event_id']}): {a['line']}" for a in active]
    if recent:
        r = recent[-1]
        lines.append(f"last: {r['kind']}{' drill' if r['drill'] else ''} {r['line']}")
    return {
        "signal": tcfg.signal,
        "dry_run": tcfg.dry_run,
        "discover": list(tcfg.discover),
        "request_file": str(c.request_file),
        "discovery_file": None if c.discovery_file is None else str(c.discovery_file),
        "trainers": c.watch.trainers,
        "targets": targets,
        "problems": list(c.watch.found.problems),
        "active": active,
        "recent": recent,
        "lines": lines,
    }


def summary(ep: Episode, now: float) -> dict[str, Any]:
    if ep.phase == EpisodeState.SCHEDULED:
        line = f"acting in {ep.act_at - now:.0f} s, deadline in {ep.deadline - now:.0f} s"
    elif ep.phase in (EpisodeState.ACTING, EpisodeState.REQUESTED):
        ago = now - (ep.requested_at or now)
        line = f"requested {ago:.0f} s ago, waiting for the ack, {ep.deadline - now:.0f} s left"
    elif ep.phase == EpisodeState.COMPLETED:
        spare = ep.deadline - (ep.finished_at or now)
        line = f"completed in {ep.duration or 0:.1f} s, {spare:.0f} s before the deadline"
    else:
        line = ep.phase
    return {
        "event_id": ep.event_id,
        "kind": ep.kind,
        "provider": ep.provider,
        "phase": ep.phase,
        "drill": ep.drill,
        "deadline": datetime.fromtimestamp(ep.deadline, UTC).isoformat(),
        "duration_seconds": ep.duration,
        "targets": [f"pid {d['pid']} ({d['comm']}): {d['outcome']}" for d in ep.deliveries],
        "line": line,
    }
