"""Prometheus exposition rendered from the latest snapshot at scrape time. It never samples.

Each source's families live in their own module (``host.py``, ``gpu.py`` ...) as a function
``render(snapshot) -> Iterable[Metric]``; :class:`SnapshotExporter` chains them. Components with
state of their own (preemption notices, checkpoints, alerts) register their own collectors on the
same registry.

A snapshot never changes once taken, so :class:`SnapshotExporter` keeps the text of the latest one:
every scrape between two ticks costs only the live families (the parts', the port's), however many
scrapers come. The registry remembers its collectors in order so the exposition can ask each.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric

from agent import __version__
from agent.exporter.text import render_text
from agent.snapshot import NodeSnapshot

Renderer = Callable[[NodeSnapshot], Iterable[Metric]]


class SnapshotExporter:
    """A prometheus_client custom collector over ``latest()``."""

    def __init__(self, latest: Callable[[], NodeSnapshot], renderers: list[Renderer]) -> None:
        self._latest = latest
        self.renderers = renderers
        self._text: tuple[NodeSnapshot, list[Renderer], bytes] | None = None

    def text(self) -> bytes:
        """The text format of ``collect()``, rendered once per snapshot (and per renderer list: a
        reload replaces it)."""
        snap = self._latest()
        cached = self._text
        if cached is not None and cached[0] is snap and cached[1] is self.renderers:
            return cached[2]
        body = render_text(self._families(snap))
        self._text = (snap, self.renderers, body)
        return body

    def collect(self) -> Iterable[Metric]:
        return self._families(self._latest())

    def _families(self, snap: NodeSnapshot) -> Iterable[Metric]:
        build = InfoMetricFamily("training_node_build", "Agent build information.")
        build.add_metric([], {"version": __version__, "python": platform.python_version()})
        yield build
        yield from collector_families(snap)
        for render in self.renderers:
            yield from render(snap)

    def describe(self) -> Iterable[Metric]:
        return []  # families are dynamic; don't make the registry call collect() at register time


def collector_families(snap: NodeSnapshot) -> Iterable[Metric]:
    ok = GaugeMetricFamily(
        "training_node_collector_success",
        "Whether the collector's last call succeeded (1) or not (0).",
        labels=["collector"],
    )
    dur = GaugeMetricFamily(
        "training_node_collector_duration_seconds",
        "Duration of the collector's last call.",
        labels=["collector"],
    )
    for name, st in sorted(snap.collectors.items()):
        ok.add_metric([name], 1.0 if st.success else 0.0)
        dur.add_metric([name], st.duration_seconds)
    yield ok
    yield dur
    ts = GaugeMetricFamily(
        "training_node_snapshot_timestamp_seconds", "Wall-clock time the latest snapshot was taken."
    )
    ts.add_metric([], snap.timestamp)
    yield ts


class Registry(CollectorRegistry):
    """A CollectorRegistry that lists its collectors in the order ``collect()`` asks them."""

    def __init__(self) -> None:
        super().__init__(auto_describe=False)
        self.collectors: list[Any] = []

    def register(self, collector: Any) -> None:
        super().register(collector)
        self.collectors.append(collector)

    def unregister(self, collector: Any) -> None:
        super().unregister(collector)
        self.collectors.remove(collector)

    def text(self) -> bytes:
        """What ``render_text(self.collect())`` gives, from each collector's own cached text where
        it keeps one."""
        return b"".join(
            c.text() if isinstance(c, SnapshotExporter) else render_text(c.collect()) for c in self.collectors
        )


def make_registry() -> Registry:
    """A registry of our own: no default process/platform/gc collectors from the global one."""
    return Registry()
