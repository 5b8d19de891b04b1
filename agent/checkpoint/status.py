"""The checkpoint action's status section: targets, the request file, open and recent episodes."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from agent.checkpoint.episodelog import Episode
from agent.checkpoint.publish import trainers_line
from agent.checkpoint.targets import Discovered
from agent.config.trainer import TrainerSection
from agent.core.vocabulary import EpisodeState, HandlerState

_READY_LINE = {HandlerState.HANDLER: "handler ready", HandlerState.HARMLESS: "signal is harmless"}


class CheckpointFacts(Protocol):
    """What the status section reads of the checkpoint action: typed here, not as the component, so
    that this face does not import the module that imports it."""

    @property
    def tcfg(self) -> TrainerSection: ...

    @property
    def request_file(self) -> Path: ...

    @property
    def discovery_file(self) -> Path | None: ...

    def found(self) -> Discovered: ...

    def handler(self, pid: int) -> HandlerState: ...

    def trainers(self) -> list[dict[str, Any]]: ...

    def episodes(self) -> list[Episode]: ...


def status(c: CheckpointFacts) -> dict[str, Any]:
    now = time.time()
    tcfg = c.tcfg
    found, trainers = c.found(), c.trainers()
    targets: list[dict[str, Any]] = [
        {
            "pid": t.pid,
            "comm": t.comm,
            "source": t.source,
            "handler": c.handler(t.pid),
        }
        for t in found.targets
    ]
    eps = sorted(c.episodes(), key=lambda e: e.received_at)
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
            "no training process found" + (f" ({'; '.join(found.problems)})" if found.problems else "")
        )
    lines.append(trainers_line(c.request_file, trainers))
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
        "trainers": trainers,
        "targets": targets,
        "problems": list(found.problems),
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
