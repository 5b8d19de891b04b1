"""The one list of sources: each ``agent/sources/<name>/`` folder registers itself here once, in its
``source.py``, and the sampler, the snapshot, the exporter and the status iterate what registered.

Adding a source is adding a folder: its collector, pure parsers, snapshot part and rates dataclasses,
metrics and status summary, and one :func:`register` call. The folders are found by walking this
package, so no list of them is written down anywhere; a consumer that reads a source's data imports
its part and rates types (``snap.part(NetworkPart)``, ``snap.rates.of(NetworkRates)``), which mypy
checks.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
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

    ``name`` is the key of its part in ``snap.parts``, the collector's name and the ``collector``
    label; consumers read the part by ``part_type`` (``snap.part(GpuPart)``) and the rates by
    ``rates_type`` (``snap.rates.of(GpuRates)``). ``build`` returns the collector (None: nothing
    to collect). A source whose ``config_section`` says ``enabled = false`` is neither built nor
    rendered: the registry checks that once (:func:`enabled`), the source does not.
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


_SOURCES: dict[str, Source] = {}
# the names, kept ready (the config and the status read them), rebuilt when a source (un)registers
_NAMES: list[frozenset[str]] = [frozenset()]


def register(source: Source) -> Source:
    """Add a source (once per name; registering the same name again replaces it, so a reloaded
    test module does not fail). Its part and rates types are its own: another source's is an error,
    and each names the source (``source: ClassVar[str]``), which is how a snapshot finds it."""
    for other in _SOURCES.values():
        if other.name != source.name and source.part_type is other.part_type:
            raise ValueError(f"part type {source.part_type.__name__} is {other.name}'s")
        if (
            other.name != source.name
            and source.rates_type is not None
            and source.rates_type is other.rates_type
        ):
            raise ValueError(f"rates type {source.rates_type.__name__} is {other.name}'s")
    for kind in (source.part_type, source.rates_type):
        if kind is not None and getattr(kind, "source", None) != source.name:
            raise TypeError(f"{kind.__name__} must say source: ClassVar[str] = {source.name!r}")
    _SOURCES[source.name] = source
    _index()
    return source


def unregister(name: str) -> None:
    _SOURCES.pop(name, None)
    _index()


def _index() -> None:
    _NAMES[0] = frozenset(_SOURCES)


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


def build_collectors(ctx: BuildContext) -> list[Collector]:
    return [c for s in sources() if enabled(ctx.cfg, s.config_section) and (c := s.build(ctx)) is not None]


def renderers(cfg: Config) -> list[Renderer]:
    return [
        r
        for s in sources()
        if s.metrics is not None and enabled(cfg, s.config_section) and (r := s.metrics(cfg)) is not None
    ]


def enabled(cfg: Config, section: str | None) -> bool:
    """Whether ``[section] enabled`` leaves the source on (a source without a section always is)."""
    return section is None or bool(getattr(getattr(cfg, section), "enabled", True))
