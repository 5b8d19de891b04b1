"""The scheduler action's faces: its section of the status JSON (and lines for `status`), its metric."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, Metric

from agent.core.vocabulary import SchedulerKind
from agent.scheduler import policy
from agent.scheduler.backend import NodeInfo
from agent.scheduler.policy import Cause, Decision, Step


class SchedulerFacts(Protocol):
    """What the status section and the metric read of the scheduler action: typed here, not as the
    component, so that this face does not import the module that imports it."""

    @property
    def kind(self) -> str | None: ...  # the backend's kind; None: no scheduler is set up

    @property
    def node_name(self) -> str | None: ...

    @property
    def node(self) -> NodeInfo | None: ...

    @property
    def dry_run(self) -> bool: ...

    @property
    def error(self) -> str | None: ...

    @property
    def causes(self) -> Mapping[str, Cause]: ...

    @property
    def decision(self) -> Decision: ...

    @property
    def actions(self) -> Mapping[tuple[str, str], int]: ...

    def health(self) -> str | None: ...


def status(c: SchedulerFacts) -> dict[str, Any]:
    info = c.node
    owner = "none"
    if info is not None and info.drained:
        owner = "agent" if policy.owns(info.reason) else "foreign"
    wanted = policy.standing(c.causes, time.time())
    lines = []
    if c.kind is None:
        if c.error:  # kind none says nothing; a scheduler that could not be set up says why
            lines.append(f"scheduler: {c.error}")
    else:
        kind = c.kind
        lines.append(f"{kind} node {c.node_name}: {_state_words(info, owner)}")
        lines += [f"  wants drained: {cause.reason}" for cause in wanted]
        if c.decision.step == Step.WAIT:
            lines.append(f"  drain stays: {c.decision.reason}")
        if c.error:
            lines.append(f"  {kind} failing: {c.error}")
    return {
        "kind": c.kind if c.kind is not None else SchedulerKind.NONE,
        "node": c.node_name,
        "dry_run": c.dry_run,
        "state": info.state if info else None,
        "drained": bool(info and info.drained),
        "reason": info.reason if info else None,
        "owner": owner,
        "causes": [cause.reason for cause in wanted],
        "decision": {"step": str(c.decision.step), "why": c.decision.reason},
        "health": c.health() or "healthy",
        "error": c.error,
        "actions": {f"{a}/{o}": n for (a, o), n in sorted(c.actions.items())},
        "lines": lines,
    }


def _state_words(info: NodeInfo | None, owner: str) -> str:
    if info is None:
        return "not read yet"
    if not info.drained:
        return info.state.lower()
    return f"drained by {'this agent' if owner == 'agent' else 'someone else'}: {info.reason}"


def metrics(c: SchedulerFacts) -> Iterable[Metric]:
    fam = CounterMetricFamily(
        "training_node_scheduler_actions",
        "Changes asked of the cluster's scheduler (drain, resume, requeue, cancel), by outcome",
        labels=["action", "outcome"],
    )
    for (action, outcome), n in sorted(c.actions.items()):
        fam.add_metric([action, outcome], n)
    yield fam
