"""The one immutable picture of the node that every consumer reads.

The sampler builds a :class:`NodeSnapshot` every tick from whatever the collectors returned; a collector
that failed or is stuck leaves its part ``None`` for that tick (its series vanish from /metrics, as
node_exporter does) and says why in ``collectors``.

Each source's part sits in ``parts`` under the source's name. A consumer reads one by its type,
``snap.part(GpuPart)`` (``GpuPart | None``, as mypy sees it too), and its rates by theirs,
``snap.rates.of(NetworkRates).nic_rx``: each type names its source (``source: ClassVar[str]``, which
the registry checks when the source registers), so a new source's folder is all it takes, a misspelt
field is a type error, and the snapshot, plain data, imports none of the sources.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from agent.snapshot.rates import NodeRates, source_of

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class CollectorStatus:
    name: str
    success: bool
    duration_seconds: float
    error: str | None = None  # one line, no secrets
    absent: bool = False  # the source does not exist on this node (no NVML, no /proc/pressure)
    stuck_seconds: float = 0.0  # how long the current call has been running, 0 if none in flight


@dataclass(frozen=True, slots=True, init=False)
class NodeSnapshot:
    seq: int
    timestamp: float  # wall clock, seconds since the epoch
    monotonic: float
    parts: Mapping[str, Any] = field(default_factory=dict)  # source name -> its part
    collectors: dict[str, CollectorStatus] = field(default_factory=dict)
    rates: NodeRates = field(default_factory=NodeRates)

    def __init__(
        self,
        seq: int,
        timestamp: float,
        monotonic: float,
        parts: Mapping[str, Any] | None = None,
        collectors: dict[str, CollectorStatus] | None = None,
        rates: NodeRates | None = None,
        **named_parts: Any,
    ) -> None:
        """``named_parts`` (``gpu=GpuPart(...)``) join ``parts``, for snapshots built by hand."""
        merged = dict(parts or {})
        for name, part in named_parts.items():
            if part is not None and getattr(type(part), "source", None) != name:
                raise TypeError(f"{type(part).__name__} is not the part of a source named {name!r}")
            merged[name] = part
        object.__setattr__(self, "seq", seq)
        object.__setattr__(self, "timestamp", timestamp)
        object.__setattr__(self, "monotonic", monotonic)
        object.__setattr__(self, "parts", {k: v for k, v in merged.items() if v is not None})
        object.__setattr__(self, "collectors", collectors if collectors is not None else {})
        object.__setattr__(self, "rates", rates if rates is not None else NodeRates())

    def part(self, kind: type[P]) -> P | None:
        """The part of ``kind``'s source; None while it has none this tick. A type that names no
        source is a LookupError, not a silent None."""
        return cast("P | None", self.parts.get(source_of(kind, "parts")))


__all__ = ["CollectorStatus", "NodeRates", "NodeSnapshot"]
