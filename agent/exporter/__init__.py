"""Prometheus exposition rendered from the latest snapshot at scrape time. It never samples.

Each source's families live in their own module (``host.py``, ``gpu.py`` ...) as a function
``render(snapshot) -> Iterable[Metric]``; :class:`SnapshotExporter` chains them. Components with
state of their own (preemption notices, checkpoints, alerts) register their own collectors on the
same registry.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric

from agent import __version__
from agent.snapshot import NodeSnapshot

Renderer = Callable[[NodeSnapshot], Iterable[Metric]]


class SnapshotExporter:
    """A prometheus_client custom collector over ``latest()``."""

    def __init__(self, latest: Callable[[], NodeSnapshot], renderers: list[Renderer]) -> None:
        self._latest = latest
        self.renderers = renderers

    def collect(self) -> Iterable[Metric]:
        snap = self._latest()
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


def make_registry() -> CollectorRegistry:
    """A registry of our own: no default process/platform/gc collectors from the global one."""
    return CollectorRegistry(auto_describe=False)
