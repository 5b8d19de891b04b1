"""What alerts say of each kind of event: its facts (``facts.py``) and its wording (``wording.py``),
one entry per kind in :data:`KINDS`. A new kind of event the alerter should say something of is one
entry here (and the alerter subscribes to it from here); a test names an event the alerter receives
without one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from agent.alerts import facts as fact
from agent.alerts import wording as word
from agent.alerts.facts import Facts
from agent.alerts.message import Message
from agent.alerts.render import Wording, said
from agent.alerts.scene import Scene
from agent.core.events import (
    AgentLifecycleEvent,
    CheckpointEvent,
    CollectorFailingEvent,
    Event,
    GoodputDigestEvent,
    GpuFaultEvent,
    JobAdviceEvent,
    PreemptionEvent,
    SchedulerEvent,
    VerdictEvent,
)


class EventAlert(NamedTuple):
    facts: Callable[[Any], Facts]
    wording: Wording


KINDS: dict[type[Event], EventAlert] = {
    PreemptionEvent: EventAlert(fact.preemption, word.preemption),
    CheckpointEvent: EventAlert(fact.checkpoint, word.checkpoint),
    VerdictEvent: EventAlert(fact.verdict, word.verdict),
    GpuFaultEvent: EventAlert(fact.gpu_fault, word.gpu_fault),
    CollectorFailingEvent: EventAlert(fact.collector_failing, word.collector_failing),
    SchedulerEvent: EventAlert(fact.scheduler, word.scheduler),
    GoodputDigestEvent: EventAlert(fact.goodput, word.goodput),
    JobAdviceEvent: EventAlert(fact.job_advice, word.job_advice),
    AgentLifecycleEvent: EventAlert(fact.agent, word.agent),
}


def facts(event: Event) -> Facts | None:
    """Routing facts, or None for events that are not alerts (instance identity)."""
    kind = KINDS.get(type(event))
    return None if kind is None else kind.facts(event)


def render(event: Event, f: Facts, scene: Scene, lang: str) -> Message:
    """The message for one event; every one of them names the jobs on the node (and what a reclaim
    would cost each) in a field of its own, and their ids in the ``job_id`` label."""
    kind = KINDS.get(type(event))
    if kind is None:
        raise TypeError(f"no alert for {type(event).__name__}")
    return said(event, f, scene, lang, kind.wording)
