"""When to act on a notice: pure functions of the event, the config and the clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from fnmatch import fnmatchcase

from agent.core.events import PreemptionEvent


@dataclass(frozen=True, slots=True)
class Plan:
    act_at: datetime  # when to signal and write the request
    deadline: datetime  # when the instance goes; the ack must come before it
    escalate_at: datetime | None  # the final SIGTERM, or None


def acts_on(kind: str, patterns: list[str]) -> bool:
    return any(fnmatchcase(kind, p) for p in patterns)


def plan(
    event: PreemptionEvent,
    now: datetime,
    checkpoint_budget: float,
    escalate_before: float,
    no_deadline_window: float,
) -> Plan:
    """A spot notice (and a drill) acts at once; a far-off notice at ``deadline - checkpoint_budget``,
    never later than now. A notice without a deadline (GCP ``preempted=TRUE``) means *now*: the ack
    window is ``no_deadline_window``."""
    deadline = event.deadline or (event.received_at + timedelta(seconds=no_deadline_window))
    if event.is_spot or event.drill:
        act_at = now
    else:
        act_at = max(now, deadline - timedelta(seconds=checkpoint_budget))
    escalate_at = None
    if escalate_before > 0:
        escalate_at = max(act_at, deadline - timedelta(seconds=escalate_before))
    return Plan(act_at=act_at, deadline=deadline, escalate_at=escalate_at)


def moved_earlier(current: Plan, new_deadline: datetime, now: datetime, escalate_before: float) -> Plan:
    """The cloud moved the deadline of a notice already acted on earlier. The request stands (never
    a second one, never a second signal); the ack must come before the new deadline, and the final
    SIGTERM moves up with it, to now if its time has already come."""
    deadline = min(current.deadline, new_deadline)
    escalate_at = None
    if escalate_before > 0:
        escalate_at = max(now, deadline - timedelta(seconds=escalate_before))
    return Plan(act_at=current.act_at, deadline=deadline, escalate_at=escalate_at)
