"""Per-second rates from two consecutive snapshot parts: the helpers each source's ``rates.py`` uses,
and :class:`NodeRates`, the rates of all sources in one snapshot.

A counter that goes backwards is a reset or a wrap (driver reload, interface re-created, 32-bit
counter wrapping): that interval yields no rate for that series instead of a negative one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, TypeVar, cast

K = TypeVar("K")
T = TypeVar("T")
R = TypeVar("R")

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


@dataclass(frozen=True, slots=True, init=False)
class NodeRates:
    """The rates of every source in one snapshot: each source's own typed dataclass (its
    ``rates.py``) under its name in ``by_source``, read by its type: ``rates.of(StorageRates)``
    (a ``StorageRates``, so ``.disk_read`` is checked by mypy). A source without rates this interval
    reads as its dataclass's defaults (``None`` or empty), never as zero. Each source's rate names
    are its own: two sources may both have an ``rx``."""

    interval_seconds: float
    by_source: Mapping[str, Any]

    def __init__(self, interval_seconds: float = 0.0, by_source: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "interval_seconds", interval_seconds)
        object.__setattr__(self, "by_source", by_source if by_source is not None else {})

    @classmethod
    def of_rates(cls, *rates: Any, interval_seconds: float = 0.0) -> NodeRates:
        """Rates built by hand (tests, benchmarks): each source's dataclass, found by its type."""
        return cls(interval_seconds, {source_of(type(r), "rates"): r for r in rates})

    def of(self, kind: type[R]) -> R:
        """The rates of ``kind``'s source, or ``kind``'s empty defaults."""
        got = self.by_source.get(source_of(kind, "rates"))
        if got is None:
            got = _EMPTY.get(kind)
            if got is None:
                got = _EMPTY[kind] = kind()
        return cast(R, got)


_EMPTY: dict[type, Any] = {}  # each rates type with its defaults: what an interval without rates reads


def source_of(kind: type, what: str) -> str:
    """The name of the source ``kind`` (a part or rates type) belongs to."""
    name = getattr(kind, "source", None)
    if not isinstance(name, str):
        raise LookupError(f"{kind.__name__} names no source ({what} types say source: ClassVar[str])")
    return name
