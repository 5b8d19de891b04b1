"""The neutral alert message: what happened, on which node and GPUs, already worded in one language.

Rendering (event -> :class:`Message`) and channel formatting (:class:`Message` -> a provider's JSON)
are separate steps; messages are what the spool stores, so they (de)serialize to plain JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    hostname: str
    instance_id: str | None = None
    instance_type: str | None = None
    region: str | None = None
    zone: str | None = None
    provider: str | None = None

    def describe(self) -> str:
        """``gpu-17 · i-bp1abc · ecs.gn7i-c32g1.8xlarge · cn-hangzhou-h``"""
        where = self.zone or self.region
        return " · ".join(p for p in (self.hostname, self.instance_id, self.instance_type, where) if p)


@dataclass(frozen=True, slots=True)
class Message:
    fingerprint: str  # same condition, same fingerprint: dedup and resolve key
    kind: str  # the event type (preemption, verdict, ...), "test" or "digest"
    severity: str  # critical | warning | info
    resolved: bool
    title: str
    node: NodeIdentity
    language: str
    at: datetime  # when it happened (UTC)
    fields: tuple[tuple[str, str], ...] = ()  # (label, value), worded
    lines: tuple[str, ...] = ()  # reasons, details
    hint: tuple[str, str] | tuple[()] = ()  # (label, what to do), shown apart from the lines
    footer: str = ""
    gpus: tuple[int, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()  # machine-readable, for the generic webhook
    starts_at: datetime | None = None  # when the condition began
    deadline: datetime | None = None
    priority: bool = False  # jumps the queue (spot and maintenance notices)
    items: tuple[Message, ...] = field(default=())  # a digest's members

    @property
    def count(self) -> int:
        """How many alerts this message stands for."""
        return sum(i.count for i in self.items) if self.items else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "kind": self.kind,
            "severity": self.severity,
            "resolved": self.resolved,
            "title": self.title,
            "node": {k: getattr(self.node, k) for k in NodeIdentity.__slots__},
            "language": self.language,
            "at": self.at.isoformat(),
            "fields": [list(f) for f in self.fields],
            "lines": list(self.lines),
            "hint": list(self.hint),
            "footer": self.footer,
            "gpus": list(self.gpus),
            "labels": [list(label) for label in self.labels],
            "starts_at": self.starts_at.isoformat() if self.starts_at else None,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "priority": self.priority,
            "items": [i.to_dict() for i in self.items],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        def when(v: str | None) -> datetime | None:
            return datetime.fromisoformat(v) if v else None

        return cls(
            fingerprint=d["fingerprint"],
            kind=d["kind"],
            severity=d["severity"],
            resolved=bool(d["resolved"]),
            title=d["title"],
            node=NodeIdentity(**d["node"]),
            language=d["language"],
            at=datetime.fromisoformat(d["at"]),
            fields=tuple((str(a), str(b)) for a, b in d.get("fields", [])),
            lines=tuple(d.get("lines", [])),
            hint=tuple(d.get("hint", [])),
            footer=d.get("footer", ""),
            gpus=tuple(d.get("gpus", [])),
            labels=tuple((str(a), str(b)) for a, b in d.get("labels", [])),
            starts_at=when(d.get("starts_at")),
            deadline=when(d.get("deadline")),
            priority=bool(d.get("priority", False)),
            items=tuple(cls.from_dict(i) for i in d.get("items", [])),
        )
