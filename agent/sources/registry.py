"""The one list of sources: each ``agent/sources/<name>/`` folder registers itself here once, in its
``source.py``, and the sampler, the snapshot, the exporter and the status iterate what registered.

Adding a source is adding a folder: its collector, pure parsers, snapshot part and rates dataclasses,
metrics and status summary, and one :func:`register` call. Nothing else names it. The folders are
found by walking this package, so no list of them is written down anywhere.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from agent.config import Config
    from agent.snapshot import NodeSnapshot
    from agent.sources import Collector


@dataclass(frozen=True, slots=True)
class BuildContext:
    """What a source's factory may use besides the config."""

    cfg: Config
    latest: Callable[[], NodeSnapshot]  # the newest snapshot (the process source follows its GPU pids)
    training_pids: Callable[[], Iterable[int]] = lambda: ()


Renderer = Callable[["NodeSnapshot"], Iterable["Metric"]]


@dataclass(frozen=True, slots=True)
class Source:
    """One source of telemetry.

    ``name`` is the snapshot attribute (``snap.gpu``), the collector's name and the ``collector``
    label. ``build`` returns the collector, or None when the config switches the source off.
    ``rates`` turns two consecutive parts and the seconds between them into a ``rates_type``.
    ``metrics`` returns the source's renderer for /metrics given the config (None: no families).
    ``status`` gives the source's keys of the status JSON; ``status_lines`` the text that
    ``training-node-agent status`` prints for them.
    """

    name: str
    part_type: type
    build: Callable[[BuildContext], Collector | None]
    config_section: str | None = None  # the [section] that configures it (``enabled`` switches it off)
    rates_type: type | None = None
    rates: Callable[[Any, Any, float], Any] | None = None
    metrics: Callable[[Config], Renderer | None] | None = None
    status: Callable[[Any, Any], dict[str, Any]] | None = None  # (part, its rates) -> keys
    status_lines: Callable[[Mapping[str, Any]], list[str]] | None = None
    # which of its status keys the TCP port may show (agent.core.projection specs); none unless listed
    tcp_view: Mapping[str, Any] = field(default_factory=dict)
    order: int = 100  # place in the snapshot, /metrics and status (built-ins 10, 20, ...)
    _defaults: list[Any] = field(default_factory=list, compare=False, repr=False)

    def make_rates(self, values: Mapping[str, Any]) -> Any:
        if self.rates_type is None:
            raise TypeError(f"source {self.name} has no rates")
        return self.rates_type(**values)

    def empty_rates(self) -> Any:
        """The rates dataclass with its defaults: what a source reads as in an interval without rates."""
        if not self._defaults:
            self._defaults.append(self.make_rates({}))
        return self._defaults[0]


_SOURCES: dict[str, Source] = {}
_RATE_OWNERS: dict[str, Source] = {}
# read every tick by every snapshot and its rates: kept ready, rebuilt when a source (un)registers
_NAMES: list[frozenset[str]] = [frozenset()]
_RATE_LAYOUT: list[tuple[tuple[Source, tuple[str, ...]], ...]] = [()]


def register(source: Source) -> Source:
    """Add a source (once per name; registering the same name again replaces it, so a reloaded
    test module does not fail)."""
    _SOURCES[source.name] = source
    _index_rates()
    return source


def unregister(name: str) -> None:
    _SOURCES.pop(name, None)
    _index_rates()


def _index_rates() -> None:
    _RATE_OWNERS.clear()
    _NAMES[0] = frozenset(_SOURCES)
    _RATE_LAYOUT[0] = tuple(
        (s, tuple(f.name for f in fields(s.rates_type)))
        for s in _SOURCES.values()
        if s.rates_type is not None
    )
    for s in _SOURCES.values():
        if s.rates_type is not None:
            for f in fields(s.rates_type):
                if f.name in _RATE_OWNERS:
                    raise ValueError(
                        f"rate {f.name!r} is defined by {_RATE_OWNERS[f.name].name} and {s.name}"
                    )
                _RATE_OWNERS[f.name] = s


@cache
def _discover() -> None:
    """Import every ``agent.sources.<name>.source`` module: each registers its source."""
    package = importlib.import_module("agent.sources")
    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg:
            try:
                importlib.import_module(f"agent.sources.{info.name}.source")
            except ModuleNotFoundError as e:
                if e.name != f"agent.sources.{info.name}.source":
                    raise


def sources() -> list[Source]:
    _discover()
    return sorted(_SOURCES.values(), key=lambda s: (s.order, s.name))


def source(name: str) -> Source:
    _discover()
    return _SOURCES[name]


def names() -> frozenset[str]:
    _discover()
    return _NAMES[0]


def rate_layout() -> tuple[tuple[Source, tuple[str, ...]], ...]:
    """Each source that has rates, with the names of its rate fields."""
    _discover()
    return _RATE_LAYOUT[0]


def rate_owner(field_name: str) -> Source:
    """The source whose rates dataclass has ``field_name``; AttributeError when none has."""
    _discover()
    try:
        return _RATE_OWNERS[field_name]
    except KeyError:
        raise AttributeError(f"no source has a rate named {field_name!r}") from None


def build_collectors(ctx: BuildContext) -> list[Collector]:
    return [c for s in sources() if (c := s.build(ctx)) is not None]


def renderers(cfg: Config) -> list[Renderer]:
    return [r for s in sources() if s.metrics is not None and (r := s.metrics(cfg)) is not None]


def enabled(cfg: Config, section: str | None) -> bool:
    """Whether ``[section] enabled`` leaves the source on (a source without a section always is)."""
    return section is None or bool(getattr(getattr(cfg, section), "enabled", True))
