"""Events -> neutral :class:`Message` in one language. Pure: no I/O, the clock comes in as ``now``.

``facts.py`` says what the alerter needs before any wording (fingerprint, severity, whether the
condition stays active until cleared); a function in ``wording.py`` per kind of event words it for
one language (``kinds.KINDS`` pairs the two, ``kinds.render`` picks, :func:`said` adds what every
message shares), and
:func:`digest`, :func:`reminder` and :func:`build_test_alert` word what the alerter makes of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, tzinfo
from typing import Any

from agent.alerts.facts import Facts
from agent.alerts.i18n import t
from agent.alerts.message import Message
from agent.alerts.scene import Scene, describe_gpus, job_lines, when
from agent.core.events import (
    Event,
)
from agent.core.vocabulary import SEVERITIES, AlertKind, Severity

ALERTNAMES: dict[str, str] = {
    AlertKind.PREEMPTION: "TrainingNodePreemption",
    AlertKind.CHECKPOINT: "TrainingNodeCheckpoint",
    AlertKind.VERDICT: "TrainingNodeBottleneck",
    AlertKind.GPU_FAULT: "TrainingNodeGpuFault",
    AlertKind.COLLECTOR_FAILING: "TrainingNodeCollectorFailing",
    AlertKind.AGENT: "TrainingNodeAgent",
    AlertKind.GOODPUT: "TrainingNodeGoodput",
    AlertKind.SCHEDULER: "TrainingNodeScheduler",
}
# one kind of event's wording: (event, facts, scene, language, the node's field, what every message
# shares) -> the message
Wording = Callable[[Any, Facts, Scene, str, tuple[str, str], dict[str, object]], Message]
MARKS = {Severity.CRITICAL: "🔴", Severity.WARNING: "🟠", Severity.INFO: "🔵", "resolved": "✅"}


def mark(msg: Message) -> str:
    return MARKS["resolved" if msg.resolved else msg.severity]


def labels(scene: Scene, f: Facts, **extra: object) -> tuple[tuple[str, str], ...]:
    alertname = ALERTNAMES.get(f.kind, "TrainingNodeAlert")
    n = scene.node
    base: dict[str, object] = {
        "alertname": alertname,
        "severity": f.severity,
        "node": n.hostname,
        "instance_id": n.instance_id,
        "instance_type": n.instance_type,
        "region": n.region,
        "zone": n.zone,
        "provider": n.provider,
        **extra,
    }
    return tuple((k, str(v)) for k, v in base.items() if v not in (None, ""))


def said(event: Event, f: Facts, scene: Scene, lang: str, how: Wording) -> Message:
    """The message ``how`` (one kind's wording, named in ``kinds.KINDS``) makes of ``event``, with
    what every kind shares: the node, the facts, the footer."""
    node_field = (t("node", lang), scene.node.describe())
    common = {
        "fingerprint": f.fingerprint,
        "kind": f.kind,
        "severity": f.severity,
        "resolved": f.resolved,
        "node": scene.node,
        "language": lang,
        "footer": f"training-node-agent · {when(scene.now, scene.tz)}",
        "priority": f.priority,
    }
    msg = how(event, f, scene, lang, node_field, common)
    if not scene.jobs:
        return msg
    # every message names the jobs on the node (and what a reclaim would cost each) in a field of
    # its own, and their ids in the ``job_id`` label
    return replace(
        msg,
        fields=(*msg.fields, (t("jobs_on_node", lang), "; ".join(job_lines(scene.jobs, lang)))),
        labels=(*msg.labels, ("job_id", ",".join(j.job_id for j, _ in scene.jobs))),
    )


def build_test_alert(scene: Scene, lang: str, channel: str) -> Message:
    f = Facts(f"test/{channel}/{scene.now.timestamp():.0f}", "test", Severity.INFO, False, False)
    return Message(
        fingerprint=f.fingerprint,
        kind="test",
        severity=Severity.INFO,
        resolved=False,
        title=t("t.test", lang, host=scene.node.hostname),
        node=scene.node,
        language=lang,
        at=scene.now,
        fields=(
            (t("node", lang), scene.node.describe()),
            (t("gpus", lang), describe_gpus(scene.gpus, (), lang)),
            (t("channel", lang), channel),
        ),
        lines=(t("test_line", lang),),
        footer=f"training-node-agent · {when(scene.now, scene.tz)}",
        labels=labels(scene, f, channel=channel),
    )


def reminder(msg: Message, tz: tzinfo) -> Message:
    """The same active condition, said again after repeat_interval."""
    since = when(msg.starts_at or msg.at, tz)
    return replace(msg, lines=(*msg.lines, t("reminder", msg.language, since=since)))


def digest(messages: list[Message], lang: str, tz: tzinfo, now: datetime) -> Message:
    """Many alerts as one: the worst severity, one line per member (the channel drops lines that
    don't fit and says how many; the count in the title always covers all of them)."""
    flat: list[Message] = []
    for m in messages:
        flat.extend(m.items or (m,))
    node = flat[0].node
    worst = min((m.severity for m in flat), key=SEVERITIES.index)
    n = len(flat)
    lines = tuple(f"{mark(m)} {when(m.at, tz)[11:19]} {m.title}" for m in flat)
    return Message(
        fingerprint=f"digest/{flat[0].fingerprint}/{n}",
        kind="digest",
        severity=worst,
        resolved=all(m.resolved for m in flat),
        title=t("t.digest", lang, n=n, host=node.hostname),
        node=node,
        language=lang,
        at=now,
        fields=((t("node", lang), node.describe()),),
        lines=lines,
        footer=f"training-node-agent · {t('digest_count', lang, n=n)} · {when(now, tz)}",
        priority=any(m.priority for m in flat),
        items=tuple(flat),
    )
