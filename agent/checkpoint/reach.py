"""How a checkpoint request reaches the trainers: the request file (always), the configured signal
(``signals.py``) and an optional loopback HTTP POST. Each records what happened in the episode's
``channels``; none raises, so one broken channel never stops the others."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from agent.checkpoint.episodelog import Episode
from agent.checkpoint.publish import trainers_line
from agent.checkpoint.request import (
    ack_path,
    post_request,
    prepare_dir,
    read_ack,
    request_payload,
    write_request,
)
from agent.checkpoint.signals import SignalDelivery, deliver
from agent.checkpoint.targets import Target
from agent.config.trainer import TrainerSection
from agent.core.vocabulary import DeliveryOutcome, EpisodeState

log = structlog.get_logger("checkpoint")


class TrainerReach:
    def __init__(self, tcfg: TrainerSection, request_file: Path, identity: dict[str, Any]) -> None:
        self.tcfg = tcfg
        self.request_file = request_file
        self.identity = identity
        self._bad_ack_logged: set[str] = set()

    def ack_file(self, ep: Episode) -> Path:
        return ack_path(self.request_file.parent, ep.event_id)

    def _payload(self, ep: Episode, state: EpisodeState) -> dict[str, Any]:
        return request_payload(ep, self.tcfg.signal, self.ack_file(ep), state, self.identity)

    def write(self, ep: Episode, state: EpisodeState) -> None:
        try:
            prepare_dir(self.request_file.parent)
            write_request(self.request_file, self._payload(ep, state))
            ep.channels["file"] = str(self.request_file)
        except OSError as e:
            ep.channels["file"] = f"error: {e.strerror or e}"
            log.error("cannot write the checkpoint request file", path=str(self.request_file), error=str(e))

    def update(self, ep: Episode, state: EpisodeState) -> None:
        """Mark the request file's state, if it still holds this episode's request."""
        try:
            current = json.loads(self.request_file.read_text())
        except (OSError, ValueError):
            return
        if isinstance(current, dict) and current.get("event_id") == ep.event_id:
            self.write(ep, state)

    async def post(self, ep: Episode) -> None:
        if not self.tcfg.http_url:
            return
        if ep.dry_run:
            ep.channels["http"] = f"would POST to {self.tcfg.http_url}"
            return
        payload = self._payload(ep, EpisodeState.REQUESTED)
        ep.channels["http"] = f"POST {self.tcfg.http_url}: " + await post_request(
            self.tcfg.http_url, payload, self.tcfg.http_timeout
        )

    def read_ack(self, path: Path, ep: Episode) -> dict[str, Any] | None:
        try:
            ack = read_ack(path, ep.event_id)
        except ValueError as e:
            if ep.event_id not in self._bad_ack_logged:
                self._bad_ack_logged.add(ep.event_id)
                log.warning("ignoring an unusable ack file", event_id=ep.event_id, error=str(e))
            return None
        if ack is not None:
            with contextlib.suppress(OSError, ValueError):
                raw = json.loads(path.read_text())
                ack["at"] = trainer_time(raw.get("at"), ep, ack["at"])
        return ack

    def signal(
        self, ep: Episode, targets: Sequence[Target], signum: int, procfs: str
    ) -> list[SignalDelivery]:
        """Send the checkpoint signal to each target (each checked first, see ``signals.py``).

        On the event loop, not in a worker thread: the caller has just recorded ``acting``, and a
        kill -9 between that record and kill(2) leaves a notice that is never signalled (a resumed
        ``acting`` episode is not signalled again). A worker may wait its turn behind slow reads;
        these few small /proc reads and one syscall do not."""
        deliveries = [deliver(t, signum, procfs, ep.dry_run) for t in targets]
        ep.deliveries = [delivery_dict(d) for d in deliveries]
        for d in deliveries:
            (log.info if d.outcome in (DeliveryOutcome.SIGNALLED, DeliveryOutcome.DRY_RUN) else log.warning)(
                "checkpoint signal" if not ep.dry_run else "dry-run: checkpoint signal",
                event_id=ep.event_id,
                target=d.target.describe(),
                source=d.target.source,
                signal=d.signal,
                outcome=d.outcome,
                detail=d.detail,
            )
        return deliveries

    async def escalate(self, ep: Episode, procfs: str) -> str:
        """The final SIGTERM to the targets that were signalled; what happened, in words."""
        targets = [
            Target(d["pid"], d["start_time_ticks"], d["comm"], d["source"])
            for d in ep.deliveries
            if "start_time_ticks" in d
        ]
        results = await asyncio.to_thread(
            lambda: [deliver(t, signal.SIGTERM, procfs, ep.dry_run, check_handler=False) for t in targets]
        )
        return "; ".join(d.line() for d in results) or "no target left"

    def trainers(self, trainers: list[dict[str, Any]], discovery_file: Path | None) -> str:
        """Who found the request file, for the episode's record."""
        if trainers:
            return trainers_line(self.request_file, trainers).split(": ", 1)[1]
        how = (
            f"they find it through {discovery_file}"
            if discovery_file is not None
            else "no discovery record is published"
        )
        env = f"TNA_CHECKPOINT_REQUEST_FILE={self.request_file}"
        return f"NO trainer has found {self.request_file} ({how}, or {env})"


def trainer_time(value: Any, ep: Episode, fallback: float) -> float:
    """The trainer's own ack time (same host clock) when it is plausible; the read time otherwise."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        lo = ep.requested_at or 0
        if lo <= value <= fallback:
            return float(value)
    return fallback


def delivery_dict(d: SignalDelivery) -> dict[str, Any]:
    return {
        "pid": d.target.pid,
        "start_time_ticks": d.target.start_time_ticks,
        "comm": d.target.comm,
        "source": d.target.source,
        "signal": d.signal,
        "outcome": d.outcome,
        "detail": d.detail,
    }
