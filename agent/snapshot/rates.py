"""Per-second rates from two consecutive snapshot parts: the helpers each source's ``rates.py`` uses,
and :class:`NodeRates`, the rates of all sources in one snapshot.

A counter that goes backwards is a reset or a wrap (driver reload, interface re-created, 32-bit
counter wrapping): that interval yields no rate for that series instead of a negative one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter
from typing import Any, TypeVar

from agent.sources import registry

K = TypeVar("K")
T = TypeVar("T")

DEVICE = attrgetter("device")


def counter_rate(prev: float | None, cur: float | None, seconds: float) -> float | None:
    """Rate of a cumulative counter; ``None`` for a reset, a gap or a zero interval."""
    if prev is None or cur is None or seconds <= 0 or cur < prev:
        return None
    return (cur - prev) / seconds


def pairs(prev: Iterable[T], cur: Iterable[T], key: Callable[[T], K]) -> list[tuple[K, T, T]]:
    """``(key, before, now)`` for each item of ``cur`` that ``prev`` has too; matched once per part,
    then every counter of the part is read from the pairs (this runs on the event loop every tick)."""
    before = {key(item): item for item in prev}
    return [(k, before[k], item) for item in cur if (k := key(item)) in before]


def rates(pairs: list[tuple[K, T, T]], value: Callable[[T], float | None], dt: float) -> dict[K, float]:
    out: dict[K, float] = {}
    if dt <= 0:
        return out
    for k, a, b in pairs:
        x, y = value(a), value(b)
        if x is not None and y is not None and y >= x:  # counter_rate, inlined: ~200 calls a tick
            out[k] = (y - x) / dt
    return out


def sum_opt(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


class NodeRates:
    """The rates of every source in one snapshot, each source's own typed dataclass (its
    ``rates.py``) under its name in ``by_source``.

    Consumers read a rate by its field name (``rates.disk_read``, ``rates.cpu_busy_ratio``), which the
    constructor copies from the source that defines it, so reading one costs what an attribute does
    (the exporter and the classifier read hundreds a tick). A source without rates this interval
    reads as its dataclass's defaults (``None`` or empty), never as zero. The constructor also takes
    the flat names, for tests and benchmarks that build a snapshot by hand."""

    by_source: Mapping[str, Any]
    interval_seconds: float

    def __init__(
        self, interval_seconds: float = 0.0, by_source: Mapping[str, Any] | None = None, **fields: Any
    ) -> None:
        merged = dict(by_source or {})
        if fields:
            grouped: dict[str, dict[str, Any]] = {}
            for name, value in fields.items():
                grouped.setdefault(registry.rate_owner(name).name, {})[name] = value
            for source, values in grouped.items():
                merged[source] = registry.source(source).make_rates(values)
        flat: dict[str, Any] = {"interval_seconds": interval_seconds, "by_source": merged}
        for src, names in registry.rate_layout():
            got = merged.get(src.name)
            obj = got if got is not None else src.empty_rates()
            for name in names:
                flat[name] = getattr(obj, name)
        self.__dict__.update(flat)

    def __getattr__(self, name: str) -> Any:
        # a source registered after this snapshot was taken
        if name.startswith("__"):
            raise AttributeError(name)
        owner = registry.rate_owner(name)
        got = self.by_source.get(owner.name)
        return getattr(got if got is not None else owner.empty_rates(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("NodeRates is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NodeRates):
            return NotImplemented
        return (self.interval_seconds, self.by_source) == (other.interval_seconds, other.by_source)

    def __repr__(self) -> str:
        return f"NodeRates(interval_seconds={self.interval_seconds!r}, by_source={self.by_source!r})"
