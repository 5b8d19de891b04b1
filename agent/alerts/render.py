"""Events -> neutral :class:`Message` in one language. Pure: no I/O, the clock comes in as ``now``.

``facts.py`` says what the alerter needs before any wording (fingerprint, severity, whether the
condition stays active until cleared); :func:`render` words it for one language, and
:func:`digest`, :func:`reminder` and :func:`build_test_alert` word what the alerter makes of it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, tzinfo

from agent.alerts import i18n
from agent.alerts.facts import Facts
from agent.alerts.i18n import t
from agent.alerts.message import Message
from agent.alerts.scene import Scene, describe_gpus, job_lines, ranges, when
from agent.core.events import (
    AgentLifecycleEvent,
    CheckpointEvent,
    CollectorFailingEvent,
    Event,
    GoodputDigestEvent,
    GpuFaultEvent,
    PreemptionEvent,
    SchedulerEvent,
    VerdictEvent,
)
from agent.core.vocabulary import SEVERITIES, AlertKind, CheckpointPhase, SchedulerProblem, Severity

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
MARKS = {Severity.CRITICAL: "🔴", Severity.WARNING: "🟠", Severity.INFO: "🔵", "resolved": "✅"}


def mark(msg: Message) -> str:
    return MARKS["resolved" if msg.resolved else msg.severity]


def _labels(scene: Scene, f: Facts, **extra: object) -> tuple[tuple[str, str], ...]:
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


def render(event: Event, f: Facts, scene: Scene, lang: str) -> Message:
    """The message for one event; every one of them names the jobs on the node (and what a reclaim
    would cost each) in a field of its own, and their ids in the ``job_id`` label."""
    msg = _render(event, f, scene, lang)
    if not scene.jobs:
        return msg
    return replace(
        msg,
        fields=(*msg.fields, (t("jobs_on_node", lang), "; ".join(job_lines(scene.jobs, lang)))),
        labels=(*msg.labels, ("job_id", ",".join(j.job_id for j, _ in scene.jobs))),
    )


def _render(event: Event, f: Facts, scene: Scene, lang: str) -> Message:
    host = scene.node.hostname
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
    if isinstance(event, PreemptionEvent):
        kind = i18n.notice_kind(event.kind, lang)
        left = event.seconds_remaining
        if event.withdrawn:
            title = t("t.preemption_withdrawn", lang, kind=kind, host=host)
        elif left is None or left <= 0:
            title = t("t.preemption_now", lang, kind=kind, host=host)
        else:
            title = t("t.preemption", lang, kind=kind, left=i18n.duration(left, lang), host=host)
        fields = [node_field, (t("gpus", lang), describe_gpus(scene.gpus, (), lang))]
        fields.append((t("notice", lang), kind))
        fields.append((t("cloud", lang), i18n.cloud(event.provider, lang)))
        if event.deadline is not None:
            fields.append((t("deadline", lang), when(event.deadline, scene.tz)))
            if left is not None and not event.withdrawn:
                fields.append(
                    (t("time_left", lang), t("left_at_notice", lang, left=i18n.duration(left, lang)))
                )
        elif not event.withdrawn:
            fields.append((t("deadline", lang), t("no_deadline", lang)))
        fields.append((t("event_id", lang), event.event_id))
        return Message(
            title=(t("drill", lang) if event.drill else "") + title,
            at=event.received_at,
            fields=tuple(fields),
            labels=_labels(scene, f, notice_kind=event.kind, event_id=event.event_id),
            starts_at=event.received_at,
            deadline=event.deadline,
            **common,  # type: ignore[arg-type]
        )
    if isinstance(event, CheckpointEvent):
        took = i18n.duration(event.duration_seconds or 0, lang)
        key = f"t.checkpoint.{event.phase}"
        if key in i18n.TEXT:
            title = t(key, lang, host=host, took=took)
        else:
            title = t("t.checkpoint.other", lang, phase=event.phase, host=host)
        fields = [node_field, (t("gpus", lang), describe_gpus(scene.gpus, (), lang))]
        fields.append((t("notice", lang), i18n.notice_kind(event.notice_kind, lang)))
        if event.deadline is not None:
            left = (event.deadline - event.at).total_seconds()
            fields.append((t("deadline", lang), when(event.deadline, scene.tz)))
            if event.phase == CheckpointPhase.REQUESTED and left > 0:
                fields.append(
                    (t("time_left", lang), t("left_at_notice", lang, left=i18n.duration(left, lang)))
                )
        if event.duration_seconds is not None:
            fields.append((t("took", lang), took))
        if event.targets:
            fields.append((t("trainer", lang), ", ".join(event.targets)))
        return Message(
            title=(t("drill", lang) if event.drill else "") + title,
            at=event.at,
            fields=tuple(fields),
            lines=(event.detail,) if event.detail else (),
            labels=_labels(scene, f, phase=event.phase, event_id=event.event_id),
            starts_at=event.at,
            deadline=event.deadline,
            **common,  # type: ignore[arg-type]
        )
    if isinstance(event, VerdictEvent):
        name = i18n.verdict_name(event.verdict, lang)
        shown = name + (f" ({event.sub_reason})" if event.sub_reason else "")
        key = "t.verdict_cleared" if event.cleared else "t.verdict"
        fields = [node_field, (t("gpus", lang), describe_gpus(scene.gpus, event.gpus, lang))]
        fields.append((t("verdict", lang), shown))
        fields.append((t("since", lang), when(event.since, scene.tz)))
        if event.cleared:
            fields.append((t("lasted", lang), i18n.duration((scene.now - event.since).total_seconds(), lang)))
        if event.scores:
            scores = ", ".join(f"{k} {v:.2f}" for k, v in sorted(event.scores.items(), key=lambda kv: -kv[1]))
            fields.append((t("scores", lang), scores))
        hint = (t("hint", lang), event.hint) if event.hint and not event.cleared else ()
        return Message(
            title=(t("resolved", lang) if event.cleared else "") + t(key, lang, verdict=shown, host=host),
            at=scene.now,
            fields=tuple(fields),
            lines=event.reasons,
            hint=hint,
            gpus=event.gpus,
            labels=_labels(
                scene, f, verdict=event.verdict, sub_reason=event.sub_reason, gpus=ranges(list(event.gpus))
            ),
            starts_at=event.since,
            **common,  # type: ignore[arg-type]
        )
    if isinstance(event, GpuFaultEvent):
        key = f"t.gpu.{event.fault}" if f"t.gpu.{event.fault}" in i18n.TEXT else "t.gpu.other"
        title = t(key, lang, gpu=event.gpu, xid=event.xid, fault=event.fault, host=host)
        gpu_line = f"GPU {event.gpu} · {event.model}" + (f" · {event.uuid}" if event.uuid else "")
        fields = [node_field, (t("gpus", lang), gpu_line)]
        if event.detail:
            fields.append((t("detail", lang), event.detail))
        return Message(
            title=(t("resolved", lang) if event.cleared else "") + title,
            at=event.at,
            fields=tuple(fields),
            gpus=(event.gpu,),
            labels=_labels(scene, f, fault=event.fault, gpu=event.gpu, gpu_uuid=event.uuid, xid=event.xid),
            starts_at=event.at,
            **common,  # type: ignore[arg-type]
        )
    if isinstance(event, SchedulerEvent):
        return _scheduler(event, f, scene, lang, node_field, common)
    if isinstance(event, CollectorFailingEvent):
        if event.cleared:
            title = t("resolved", lang) + t("t.collector_cleared", lang, name=event.collector, host=host)
        else:
            took = i18n.duration(event.failing_for_seconds, lang)
            title = t("t.collector", lang, name=event.collector, took=took, host=host)
        fields = [node_field, (t("gpus", lang), describe_gpus(scene.gpus, (), lang))]
        fields.append((t("collector", lang), event.collector))
        if event.error:
            fields.append((t("error", lang), event.error))
        return Message(
            title=title,
            at=scene.now,
            fields=tuple(fields),
            labels=_labels(scene, f, collector=event.collector),
            **common,  # type: ignore[arg-type]
        )
    if isinstance(event, AgentLifecycleEvent):
        key = f"t.agent.{event.phase}" if f"t.agent.{event.phase}" in i18n.TEXT else "t.agent.other"
        fields = [node_field, (t("gpus", lang), describe_gpus(scene.gpus, (), lang))]
        fields.append((t("version", lang), event.version))
        if scene.pid is not None:
            fields.append((t("pid", lang), str(scene.pid)))
        return Message(
            title=t(key, lang, phase=event.phase, host=host),
            at=scene.now,
            fields=tuple(fields),
            lines=(event.detail,) if event.detail else (),
            labels=_labels(scene, f, phase=event.phase),
            **common,  # type: ignore[arg-type]
        )
    if isinstance(event, GoodputDigestEvent):
        return _goodput(event, f, scene, lang, node_field, common)
    raise TypeError(f"no alert for {type(event).__name__}")


def _goodput(
    event: GoodputDigestEvent,
    f: Facts,
    scene: Scene,
    lang: str,
    node_field: tuple[str, str],
    common: dict[str, object],
) -> Message:
    ratio = "—" if event.ratio is None else f"{event.ratio:.1%}"
    period = i18n.duration((event.until - event.since).total_seconds(), lang)
    fields = [node_field, (t("gpus", lang), describe_gpus(scene.gpus, (), lang))]
    fields.append((t("goodput", lang), ratio))
    fields.append((t("gpu_hours", lang), f"{event.gpu_seconds / 3600:.2f}"))
    if event.cost is not None and event.currency:
        fields.append((t("spent", lang), f"{event.cost:.2f} {event.currency}"))
        fields.append((t("wasted", lang), f"{event.wasted or 0:.2f} {event.currency}"))
    if event.top_waste:
        fields.append((t("top_waste", lang), i18n.bucket_name(event.top_waste, lang)))
    total = event.gpu_seconds or 1.0
    shown = sorted(((v, k) for k, v in event.buckets.items() if v > 0), reverse=True)
    lines = [
        t(
            "bucket_line",
            lang,
            bucket=i18n.bucket_name(k, lang),
            hours=f"{v / 3600:.2f}",
            share=f"{v / total:.1%}",
        )
        for v, k in shown
    ]
    lines += list(event.cadence)
    return Message(
        title=t("t.goodput", lang, ratio=ratio, host=scene.node.hostname, period=period),
        at=event.until,
        fields=tuple(fields),
        lines=tuple(lines),
        hint=(t("hint", lang), event.remedy) if event.remedy else (),
        labels=_labels(scene, f, goodput=ratio, top_waste=event.top_waste),
        starts_at=event.since,
        **common,  # type: ignore[arg-type]
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
        labels=_labels(scene, f, channel=channel),
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


def _scheduler(
    event: SchedulerEvent,
    f: Facts,
    scene: Scene,
    lang: str,
    node_field: tuple[str, str],
    common: dict[str, object],
) -> Message:
    host = scene.node.hostname
    if event.problem == SchedulerProblem.FAILING:
        key = "t.scheduler.failing_cleared" if event.cleared else "t.scheduler.failing"
    else:
        key = f"t.scheduler.{event.problem}"
        key = key if key in i18n.TEXT else "t.scheduler.other"
    title = t(key, lang, count=len(event.jobs), problem=event.problem, host=host)
    fields = [node_field]
    if event.jobs:
        fields.append((t("jobs", lang), "; ".join(event.jobs)))
    if event.detail:
        fields.append((t("detail", lang), event.detail))
    if event.event_id:
        fields.append((t("event_id", lang), event.event_id))
    return Message(
        title=(t("resolved", lang) if event.cleared else "") + title,
        at=event.at,
        fields=tuple(fields),
        labels=_labels(scene, f, problem=event.problem, slurm_node=event.node),
        starts_at=event.at,
        **common,  # type: ignore[arg-type]
    )
