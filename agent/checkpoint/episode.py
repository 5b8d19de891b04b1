"""The checkpoint episode as a state machine: pure functions of the episode, what happened and the
time, returning what the episode becomes and what to tell the world. The runner
(``runner.py``) does the I/O: signals, the request file, the episode log, the bus.

    scheduled --act_at--> acting --signals sent--> requested --ack--> completed
                                       |               |--deadline or late ack--> missed
                                       `--dry run--> dry-run
    any open state --withdrawn--> canceled           requested --escalate_at--> (final SIGTERM)

Times are unix seconds, as in the episode log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from agent.checkpoint.episodelog import Episode
from agent.core.vocabulary import UNREACHABLE_OUTCOMES, CheckpointPhase, DeliveryOutcome, EpisodeState


@dataclass(frozen=True, slots=True)
class EpisodeStep:
    """What one event does to an episode."""

    state: EpisodeState  # the episode's state afterwards
    publish: tuple[CheckpointPhase, ...] = ()  # events for the bus, in this order
    request_state: EpisodeState | None = None  # the request file's new state; None: leave the file
    late_ack: bool = False


class Wake(StrEnum):
    """What the time alone calls for while an episode waits for its ack."""

    ESCALATE = "escalate"  # send the final SIGTERM
    MISS = "miss"  # the deadline passed without an ack


class Again(StrEnum):
    """What a notice already in the episode log calls for when it comes again."""

    RESCHEDULE = "reschedule"  # not acted on yet, and its deadline changed: plan it afresh
    MOVE_EARLIER = "move-earlier"  # acted on, and the deadline came closer: follow it, no new request
    IGNORE = "ignore"


def on_notice_again(ep: Episode, deadline: float | None) -> Again:
    if ep.phase == EpisodeState.SCHEDULED and deadline is not None and deadline != ep.deadline:
        return Again.RESCHEDULE
    if ep.open and deadline is not None and deadline < ep.deadline - 1:
        return Again.MOVE_EARLIER
    return Again.IGNORE


def on_resume(ep: Episode) -> EpisodeStep:
    """After an agent restart: an episode that died while signalling is not signalled again (the
    request file, which trainers de-duplicate by event id, is rewritten instead)."""
    if ep.phase == EpisodeState.ACTING:
        return EpisodeStep(EpisodeState.REQUESTED, request_state=EpisodeState.REQUESTED)
    if ep.phase == EpisodeState.REQUESTED:
        # the file names the agent that is gone, and trainers ignore such requests: it is ours now
        return EpisodeStep(EpisodeState.REQUESTED, request_state=EpisodeState.REQUESTED)
    return EpisodeStep(ep.phase)


def on_signals_sent(outcomes: Sequence[DeliveryOutcome], dry_run: bool) -> EpisodeStep:
    """The request went out (file first, then the signals). ``unreachable`` is published before
    ``requested``: consumers treat it as an end of the episode (the classifier stops holding
    verdicts), so it must not follow the event that starts the hold."""
    if dry_run:
        return EpisodeStep(EpisodeState.DRY_RUN)
    publish: list[CheckpointPhase] = []
    if any(o in UNREACHABLE_OUTCOMES for o in outcomes):
        publish.append(CheckpointPhase.UNREACHABLE)
    publish.append(CheckpointPhase.REQUESTED if outcomes else CheckpointPhase.NO_TARGET)
    return EpisodeStep(EpisodeState.REQUESTED, tuple(publish))


def on_ack(ep: Episode, ack_at: float) -> EpisodeStep:
    """An ack counts when it came by the deadline; a late one is a miss."""
    if ack_at > ep.deadline:
        return EpisodeStep(EpisodeState.MISSED, (CheckpointPhase.MISSED,), EpisodeState.MISSED, late_ack=True)
    return EpisodeStep(EpisodeState.COMPLETED, (CheckpointPhase.COMPLETED,), EpisodeState.COMPLETED)


def on_time(ep: Episode, now: float) -> list[Wake]:
    """What is due at ``now`` for an episode waiting for its ack (escalation before the miss)."""
    due: list[Wake] = []
    if ep.escalate_at is not None and not ep.escalated and now >= ep.escalate_at:
        due.append(Wake.ESCALATE)
    if now >= ep.deadline:
        due.append(Wake.MISS)
    return due


def on_deadline(ep: Episode) -> EpisodeStep:
    return EpisodeStep(EpisodeState.MISSED, (CheckpointPhase.MISSED,), EpisodeState.MISSED)


def on_withdrawn(ep: Episode) -> EpisodeStep | None:
    """The cloud took the notice back (or a drill stopped waiting); None when nothing is pending.
    The request file is marked only when the request went out."""
    if not ep.open:
        return None
    requested = ep.phase != EpisodeState.SCHEDULED
    return EpisodeStep(
        EpisodeState.CANCELED,
        (CheckpointPhase.CANCELED,),
        EpisodeState.CANCELED if requested else None,
    )
