"""The preemption watcher's faces: its status section, the text lines and the metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

from agent.core.events import InstanceIdentityEvent, PreemptionEvent
from agent.preemption.client import RequestCounter
from agent.preemption.notices import ActiveNotice


@dataclass
class SourceState:
    """One notice source as the watcher last saw it; the watcher keeps it, the status shows it."""

    name: str
    cadence: str
    reads: int = 0
    errors: int = 0  # consecutive
    last_ok: float | None = None  # wall time
    last_error: str | None = None
    last_error_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "cadence": self.cadence,
            "reads": self.reads,
            "consecutive_errors": self.errors,
            "last_ok": iso(self.last_ok),
            "last_error": self.last_error,
            "last_error_at": iso(self.last_error_at),
        }


class WatcherFacts(Protocol):
    """What these faces read of the preemption watcher: typed here, not as the watcher, so that the
    faces do not import the module that imports them."""

    @property
    def provider_name(self) -> str: ...

    @property
    def selected_by(self) -> str: ...

    @property
    def kinds(self) -> tuple[str, ...] | None: ...  # the provider's notice kinds; None: the watcher is off

    @property
    def endpoint(self) -> str | None: ...

    @property
    def token_state(self) -> str | None: ...

    @property
    def instance(self) -> InstanceIdentityEvent | None: ...

    @property
    def acks(self) -> Mapping[str, str]: ...

    @property
    def counter(self) -> RequestCounter: ...

    @property
    def sources(self) -> Mapping[str, SourceState]: ...

    @property
    def warnings(self) -> Mapping[str, dict[str, Any]]: ...

    @property
    def recent(self) -> Sequence[dict[str, Any]]: ...

    def notices(self) -> list[ActiveNotice]: ...


def active_notices(w: WatcherFacts) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    out = []
    for n in sorted(w.notices(), key=lambda n: (n.deadline is None, n.deadline or now)):
        ev = n.event
        deadline = n.deadline or ev.deadline
        out.append(
            {
                "event_id": ev.event_id,
                "provider": ev.provider,
                "kind": ev.kind,
                "source": n.source,
                "deadline": deadline.isoformat() if deadline else None,
                "received_at": ev.received_at.isoformat(),
                "seconds_remaining_at_receipt": ev.seconds_remaining,
                "remaining_seconds": round((deadline - now).total_seconds(), 1) if deadline else None,
                "raw": ev.raw[:500],
                **({f"{ev.provider}_ack": w.acks[ev.event_id]} if ev.event_id in w.acks else {}),
            }
        )
    return out


def status(w: WatcherFacts) -> dict[str, Any]:
    active = active_notices(w)
    requests: dict[str, int] = {}
    for (_, outcome), n in w.counter.counts.items():
        requests[outcome] = requests.get(outcome, 0) + n
    return {
        "provider": w.provider_name,
        "selected_by": w.selected_by,
        "enabled": w.kinds is not None,
        "endpoint": w.endpoint,
        "token": w.token_state,
        "instance": _identity_dict(w.instance),
        "active": active,
        "sources": {name: st.as_dict() for name, st in w.sources.items()},
        "requests": requests,
        "warnings": list(w.warnings.values())[-10:],
        "recent": list(w.recent)[-10:],
        "lines": lines(w, active),
    }


def lines(w: WatcherFacts, active: list[dict[str, Any]]) -> list[str]:
    if w.kinds is None:
        return [f"off: provider none ({w.selected_by}); no metadata request is sent"]
    lines = [f"{w.provider_name} at {w.endpoint} ({w.selected_by})"]
    if w.instance:
        i = w.instance
        lines.append(
            f"instance {i.instance_id or '?'}  {i.instance_type or '?'}  {i.region or '?'}/{i.zone or '?'}"
        )
    if not active:
        lines.append("no notice")
    for n in active:
        left = n["remaining_seconds"]
        when = (
            "deadline unknown: act now" if left is None else f"deadline {n['deadline']}, {_countdown(left)}"
        )
        lines.append(f"NOTICE {n['kind']} ({n['event_id']}): {when}")
    failing = [st for st in w.sources.values() if st.errors]
    for st in failing:
        lines.append(f"metadata {st.name}: FAILING x{st.errors}: {st.last_error}")
    if not failing and w.sources:
        lines.append(f"metadata ok: {w.counter.total()} requests")
    return lines


def metrics(w: WatcherFacts) -> list[Metric]:
    if w.kinds is None:
        return []
    notice = GaugeMetricFamily(
        "training_node_preemption_notice",
        "Whether a notice of this kind is active (1) or not (0).",
        labels=["kind"],
    )
    deadline = GaugeMetricFamily(
        "training_node_preemption_deadline_timestamp_seconds",
        "Unix time of the earliest active notice's deadline, per kind (absent when unknown).",
        labels=["kind"],
    )
    remaining = GaugeMetricFamily(
        "training_node_preemption_notice_remaining_seconds",
        "Seconds the cloud left before the deadline when the notice was received.",
        labels=["kind"],
    )
    earliest: dict[str, PreemptionEvent] = {}
    active_kinds = set()
    for n in w.notices():
        ev = n.event
        active_kinds.add(ev.kind)
        if ev.deadline is not None and (
            ev.kind not in earliest or ev.deadline < earliest[ev.kind].deadline  # type: ignore[operator]
        ):
            earliest[ev.kind] = ev
    for kind in sorted(set(w.kinds) | active_kinds):
        notice.add_metric([kind], 1.0 if kind in active_kinds else 0.0)
    for kind, ev in sorted(earliest.items()):
        assert ev.deadline is not None
        deadline.add_metric([kind], ev.deadline.timestamp())
        remaining.add_metric([kind], float(ev.seconds_remaining or 0.0))
    requests = CounterMetricFamily(
        "training_node_metadata_requests",
        "Requests to the cloud metadata service, by outcome.",
        labels=["provider", "outcome"],
    )
    for (provider, outcome), count in sorted(w.counter.counts.items()):
        requests.add_metric([provider, outcome], float(count))
    out: list[Metric] = [notice, deadline, remaining, requests]
    if w.counter.last_success:
        last = GaugeMetricFamily(
            "training_node_metadata_last_success_timestamp_seconds",
            "Unix time of the last answered metadata request.",
            labels=["provider"],
        )
        for provider, t in sorted(w.counter.last_success.items()):
            last.add_metric([provider], t)
        out.append(last)
    if w.instance is not None:
        info = InfoMetricFamily("training_node_instance", "The cloud instance this node is, from metadata.")
        info.add_metric([], {k: v or "" for k, v in _identity_dict(w.instance).items()})  # type: ignore[union-attr]
        out.append(info)
    return out


def _identity_dict(ident: InstanceIdentityEvent | None) -> dict[str, str | None] | None:
    if ident is None:
        return None
    return {
        "provider": ident.provider,
        "instance_id": ident.instance_id,
        "instance_type": ident.instance_type,
        "region": ident.region,
        "zone": ident.zone,
    }


def iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds") if t else None


def _countdown(seconds: float) -> str:
    s = abs(int(seconds))
    text = f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
    return f"{text} left" if seconds >= 0 else f"passed {text} ago"
