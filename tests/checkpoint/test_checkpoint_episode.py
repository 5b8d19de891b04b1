"""The episode state machine on its own: events and times in, states and publications out."""

from __future__ import annotations

import random

import pytest

from agent.checkpoint import episode
from agent.checkpoint.episode import Again, Wake
from agent.checkpoint.episodelog import Episode
from agent.core.vocabulary import CHECKPOINT_ENDS, OPEN_STATES, CheckpointPhase, DeliveryOutcome, EpisodeState

T0 = 1_700_000_000.0


def _ep(phase: EpisodeState, deadline: float = T0 + 300, escalate_at: float | None = None) -> Episode:
    return Episode(
        event_id="e", provider="aws", kind="spot-termination", deadline=deadline, received_at=T0,
        act_at=T0, escalate_at=escalate_at, phase=phase,
    )  # fmt: skip


def test_signals_publish_unreachable_before_the_request_and_no_target_without_any():
    o = DeliveryOutcome
    assert episode.on_signals_sent([o.SIGNALLED], False).publish == (CheckpointPhase.REQUESTED,)
    mixed = episode.on_signals_sent([o.SIGNALLED, o.NO_HANDLER], False)
    assert mixed.publish == (CheckpointPhase.UNREACHABLE, CheckpointPhase.REQUESTED)
    assert mixed.state == EpisodeState.REQUESTED
    assert episode.on_signals_sent([], False).publish == (CheckpointPhase.NO_TARGET,)
    dry = episode.on_signals_sent([o.DRY_RUN], True)
    assert (dry.state, dry.publish, dry.request_state) == (EpisodeState.DRY_RUN, (), None)


def test_an_ack_by_the_deadline_completes_and_a_late_one_misses():
    ep = _ep(EpisodeState.REQUESTED)
    ok = episode.on_ack(ep, ep.deadline)
    assert (ok.state, ok.publish, ok.request_state, ok.late_ack) == (
        EpisodeState.COMPLETED, (CheckpointPhase.COMPLETED,), EpisodeState.COMPLETED, False,
    )  # fmt: skip
    late = episode.on_ack(ep, ep.deadline + 0.001)
    assert (late.state, late.late_ack, late.publish) == (EpisodeState.MISSED, True, (CheckpointPhase.MISSED,))


def test_time_escalates_once_then_misses_at_the_deadline():
    ep = _ep(EpisodeState.REQUESTED, escalate_at=T0 + 280)
    assert episode.on_time(ep, T0 + 279.9) == []
    assert episode.on_time(ep, T0 + 280) == [Wake.ESCALATE]
    ep.escalated = True
    assert episode.on_time(ep, T0 + 299) == []
    assert episode.on_time(ep, T0 + 300) == [Wake.MISS]
    # a wake-up late enough for both: the final SIGTERM still goes first
    assert episode.on_time(_ep(EpisodeState.REQUESTED, escalate_at=T0 + 280), T0 + 400) == [
        Wake.ESCALATE,
        Wake.MISS,
    ]


def test_withdrawal_marks_the_request_file_only_once_the_request_went_out():
    scheduled = episode.on_withdrawn(_ep(EpisodeState.SCHEDULED))
    assert scheduled is not None and scheduled.request_state is None
    requested = episode.on_withdrawn(_ep(EpisodeState.REQUESTED))
    assert requested is not None and requested.request_state == EpisodeState.CANCELED
    for closed in set(EpisodeState) - OPEN_STATES:
        assert episode.on_withdrawn(_ep(closed)) is None


def test_a_notice_seen_again():
    assert episode.on_notice_again(_ep(EpisodeState.SCHEDULED), T0 + 200) == Again.RESCHEDULE
    assert episode.on_notice_again(_ep(EpisodeState.SCHEDULED), T0 + 300) == Again.IGNORE
    assert episode.on_notice_again(_ep(EpisodeState.REQUESTED), T0 + 200) == Again.MOVE_EARLIER
    assert episode.on_notice_again(_ep(EpisodeState.REQUESTED), T0 + 299.5) == Again.IGNORE  # jitter
    assert episode.on_notice_again(_ep(EpisodeState.REQUESTED), T0 + 400) == Again.IGNORE  # later: no
    assert episode.on_notice_again(_ep(EpisodeState.COMPLETED), T0 + 200) == Again.IGNORE


def test_restart_never_signals_again():
    acting = episode.on_resume(_ep(EpisodeState.ACTING))
    assert (acting.state, acting.publish, acting.request_state) == (
        EpisodeState.REQUESTED, (), EpisodeState.REQUESTED,
    )  # fmt: skip
    assert episode.on_resume(_ep(EpisodeState.SCHEDULED)).state == EpisodeState.SCHEDULED


@pytest.mark.parametrize("seed", range(20))
def test_random_runs_end_exactly_once(seed):
    """Random acks, withdrawals and clock steps: every run that ends publishes exactly one end phase,
    and nothing after it changes the episode."""
    rnd = random.Random(seed)
    ep = _ep(EpisodeState.REQUESTED, escalate_at=T0 + rnd.uniform(0, 300))
    ends: list[CheckpointPhase] = []
    now = T0
    for _ in range(50):
        now += rnd.uniform(0, 30)
        roll = rnd.random()
        if not ep.open:
            assert episode.on_withdrawn(ep) is None
            continue
        if roll < 0.2:
            step = episode.on_ack(ep, now)
        elif roll < 0.3:
            step = episode.on_withdrawn(ep)
        else:
            due = episode.on_time(ep, now)
            if Wake.ESCALATE in due:
                ep.escalated = True
            step = episode.on_deadline(ep) if Wake.MISS in due else None
        if step is not None:
            ep.phase = step.state
            ends += [p for p in step.publish if p in CHECKPOINT_ENDS]
    assert len(ends) == (0 if ep.open else 1)
