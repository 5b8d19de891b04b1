"""One function per kind of event: its message in one language (``kinds.KINDS`` names each beside
the event's facts; ``render.said`` adds what every message shares). Pure: no I/O."""

from __future__ import annotations

from agent.alerts import i18n
from agent.alerts.facts import Facts
from agent.alerts.i18n import t
from agent.alerts.message import Message
from agent.alerts.render import labels
from agent.alerts.scene import Scene, describe_gpus, ranges, when
from agent.core.events import (
    AgentLifecycleEvent,
    CheckpointEvent,
    CollectorFailingEvent,
    GoodputDigestEvent,
    GpuFaultEvent,
    JobAdviceEvent,
    PreemptionEvent,
    SchedulerEvent,
    VerdictEvent,
)
from agent.core.vocabulary import CheckpointPhase, SchedulerProblem


def opening_fields(
    node_field: tuple[str, str], scene: Scene, lang: str, concerned: tuple[int, ...] = ()
) -> list[tuple[str, str]]:
    """The fields most messages open with: the node, then its GPUs (``concerned``: only the ones the
    message is about; none: all of them)."""
    return [node_field, (t("gpus", lang), describe_gpus(scene.gpus, concerned, lang))]


def preemption(
    event: PreemptionEvent,
    f: Facts,
    scene: Scene,
    lang: str,
    node_field: tuple[str, str],
    common: dict[str, object],
) -> Message:
    host = scene.node.hostname
    kind = i18n.notice_kind(event.kind, lang)
    left = event.seconds_remaining
    if event.withdrawn:
        title = t("t.preemption_withdrawn", lang, kind=kind, host=host)
    elif left is None or left <= 0:
        title = t("t.preemption_now", lang, kind=kind, host=host)
    else:
        title = t("t.preemption", lang, kind=kind, left=i18n.duration(left, lang), host=host)
    fields = opening_fields(node_field, scene, lang)
    fields.append((t("notice", lang), kind))
    fields.append((t("cloud", lang), i18n.cloud(event.provider, lang)))
    if event.deadline is not None:
        fields.append((t("deadline", lang), when(event.deadline, scene.tz)))
        if left is not None and not event.withdrawn:
            fields.append((t("time_left", lang), t("left_at_notice", lang, left=i18n.duration(left, lang))))
    elif not event.withdrawn:
        fields.append((t("deadline", lang), t("no_deadline", lang)))
    fields.append((t("event_id", lang), event.event_id))
    return Message(
        title=(t("drill", lang) if event.drill else "") + title,
        at=event.received_at,
        fields=tuple(fields),
        labels=labels(scene, f, notice_kind=event.kind, event_id=event.event_id),
        starts_at=event.received_at,
        deadline=event.deadline,
        **common,  # type: ignore[arg-type]
    )


def checkpoint(
    event: CheckpointEvent,
    f: Facts,
    scene: Scene,
    lang: str,
    node_field: tuple[str, str],
    common: dict[str, object],
) -> Message:
    host = scene.node.hostname
    took = i18n.duration(event.duration_seconds or 0, lang)
    key = f"t.checkpoint.{event.phase}"
    if key in i18n.TEXT:
        title = t(key, lang, host=host, took=took)
    else:
        title = t("t.checkpoint.other", lang, phase=event.phase, host=host)
    fields = opening_fields(node_field, scene, lang)
    fields.append((t("notice", lang), i18n.notice_kind(event.notice_kind, lang)))
    if event.deadline is not None:
        left = (event.deadline - event.at).total_seconds()
        fields.append((t("deadline", lang), when(event.deadline, scene.tz)))
        if event.phase == CheckpointPhase.REQUESTED and left > 0:
            fields.append((t("time_left", lang), t("left_at_notice", lang, left=i18n.duration(left, lang))))
    if event.duration_seconds is not None:
        fields.append((t("took", lang), took))
    if event.targets:
        fields.append((t("trainer", lang), ", ".join(event.targets)))
    return Message(
        title=(t("drill", lang) if event.drill else "") + title,
        at=event.at,
        fields=tuple(fields),
        lines=(event.detail,) if event.detail else (),
        labels=labels(scene, f, phase=event.phase, event_id=event.event_id),
        starts_at=event.at,
        deadline=event.deadline,
        **common,  # type: ignore[arg-type]
    )


def verdict(
    event: VerdictEvent,
    f: Facts,
    scene: Scene,
    lang: str,
    node_field: tuple[str, str],
    common: dict[str, object],
) -> Message:
    host = scene.node.hostname
    name = i18n.verdict_name(event.verdict, lang)
    shown = name + (f" ({event.sub_reason})" if event.sub_reason else "")
    key = "t.verdict_cleared" if event.cleared else "t.verdict"
    fields = opening_fields(node_field, scene, lang, event.gpus)
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
        labels=labels(
            scene, f, verdict=event.verdict, sub_reason=event.sub_reason, gpus=ranges(list(event.gpus))
        ),
        starts_at=event.since,
        **common,  # type: ignore[arg-type]
    )


def gpu_fault(
    event: GpuFaultEvent,
    f: Facts,
    scene: Scene,
    lang: str,
    node_field: tuple[str, str],
    common: dict[str, object],
) -> Message:
    host = scene.node.hostname
    key = f"t.gpu.{event.fault}" if f"t.gpu.{event.fault}" in i18n.TEXT else "t.gpu.other"
    title = t(key, lang, gpu=event.gpu_name, xid=event.xid, fault=event.fault, host=host)
    gpu_line = " · ".join(x for x in (f"GPU {event.gpu_name}", event.model, event.uuid) if x)
    fields = [node_field, (t("gpus", lang), gpu_line)]
    if event.detail:
        fields.append((t("detail", lang), event.detail))
    return Message(
        title=(t("resolved", lang) if event.cleared else "") + title,
        at=event.at,
        fields=tuple(fields),
        gpus=() if event.gpu is None else (event.gpu,),
        labels=labels(scene, f, fault=event.fault, gpu=event.gpu_name, gpu_uuid=event.uuid, xid=event.xid),
        starts_at=event.at,
        **common,  # type: ignore[arg-type]
    )


def collector_failing(
    event: CollectorFailingEvent,
    f: Facts,
    scene: Scene,
    lang: str,
    node_field: tuple[str, str],
    common: dict[str, object],
) -> Message:
    host = scene.node.hostname
    if event.cleared:
        title = t("resolved", lang) + t("t.collector_cleared", lang, name=event.collector, host=host)
    else:
        took = i18n.duration(event.failing_for_seconds, lang)
        title = t("t.collector", lang, name=event.collector, took=took, host=host)
    fields = opening_fields(node_field, scene, lang)
    fields.append((t("collector", lang), event.collector))
    if event.error:
        fields.append((t("error", lang), event.error))
    return Message(
        title=title,
        at=scene.now,
        fields=tuple(fields),
        labels=labels(scene, f, collector=event.collector),
        **common,  # type: ignore[arg-type]
    )


def agent(
    event: AgentLifecycleEvent,
    f: Facts,
    scene: Scene,
    lang: str,
    node_field: tuple[str, str],
    common: dict[str, object],
) -> Message:
    host = scene.node.hostname
    key = f"t.agent.{event.phase}" if f"t.agent.{event.phase}" in i18n.TEXT else "t.agent.other"
    fields = opening_fields(node_field, scene, lang)
    fields.append((t("version", lang), event.version))
    if scene.pid is not None:
        fields.append((t("pid", lang), str(scene.pid)))
    return Message(
        title=t(key, lang, phase=event.phase, host=host),
        at=scene.now,
        fields=tuple(fields),
        lines=(event.detail,) if event.detail else (),
        labels=labels(scene, f, phase=event.phase),
        **common,  # type: ignore[arg-type]
    )


def goodput(
    event: GoodputDigestEvent,
    f: Facts,
    scene: Scene,
    lang: str,
    node_field: tuple[str, str],
    common: dict[str, object],
) -> Message:
    ratio = "—" if event.ratio is None else f"{event.ratio:.1%}"
    period = i18n.duration((event.until - event.since).total_seconds(), lang)
    fields = opening_fields(node_field, scene, lang)
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
        labels=labels(scene, f, goodput=ratio, top_waste=event.top_waste),
        starts_at=event.since,
        **common,  # type: ignore[arg-type]
    )


def job_advice(
    event: JobAdviceEvent,
    f: Facts,
    scene: Scene,
    lang: str,
    node_field: tuple[str, str],
    common: dict[str, object],
) -> Message:
    # the advice's own lines are English (agent.advice.words): said as the agent wrote them
    return Message(
        title=t("t.job_advice", lang, job=event.job, host=scene.node.hostname),
        at=event.at,
        fields=(*opening_fields(node_field, scene, lang), (t("binds", lang), event.binds)),
        lines=event.lines,
        labels=labels(scene, f, advised_job=event.job, binds=event.binds),
        **common,  # type: ignore[arg-type]
    )


def scheduler(
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
    said = i18n.scheduler(event.scheduler_words, lang)
    title = t(key, lang, count=len(event.jobs), problem=event.problem, host=host, scheduler=said)
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
        labels=labels(scene, f, problem=event.problem, scheduler=event.scheduler, scheduler_node=event.node),
        starts_at=event.at,
        **common,  # type: ignore[arg-type]
    )
