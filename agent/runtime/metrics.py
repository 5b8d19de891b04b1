"""The daemon's own /metrics families, next to the snapshot's: what the parts keep themselves
(notices, checkpoints, verdicts, alerts), the metrics port's (connections, refusals, web config
reloads), the event bus's (published, dropped per subscriber) and the notify socket's (dropped)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import structlog
from prometheus_client.core import CounterMetricFamily, Metric

from agent.core.component import Component, HasMetrics
from agent.core.events import EventBus
from agent.exporter.server import HttpFace
from agent.runtime.sdnotify import Notifier

log = structlog.get_logger("daemon")


def bus_families(bus: EventBus) -> Iterable[Metric]:
    published = CounterMetricFamily("training_node_events_published", "Events published on the agent's bus.")
    published.add_metric([], bus.published)
    yield published
    dropped = CounterMetricFamily(
        "training_node_events_dropped",
        "Events a subscriber lost because its queue was full (it fell behind; the oldest go first).",
        labels=["subscriber"],
    )
    for name in bus.subscribers:
        dropped.add_metric([name], bus.dropped.get(name, 0))
    yield dropped


def notify_families(notifier: Notifier) -> Iterable[Metric]:
    dropped = CounterMetricFamily(
        "training_node_notify_dropped",
        "sd_notify datagrams not sent because $NOTIFY_SOCKET would not take them (its listener"
        " stopped reading, or is gone); the daemon never waits on it.",
    )
    dropped.add_metric([], notifier.dropped)
    yield dropped


class PartMetrics:
    """A prometheus collector over what runs now: a reload's new parts and HTTP face are read at
    the next scrape, so it takes getters, not the objects."""

    def __init__(
        self,
        components: Callable[[], Iterable[Component]],
        http: Callable[[], HttpFace | None],
        bus: EventBus,
        notifier: Notifier,
    ) -> None:
        self._components = components
        self._http = http
        self._bus = bus
        self._notifier = notifier

    def collect(self) -> Iterable[Metric]:
        for comp in self._components():
            if isinstance(comp, HasMetrics):
                try:
                    yield from comp.metrics()
                except Exception:  # one part's broken families must not cost the scrape the rest
                    log.exception("component metrics failed", component=comp.name)
        http = self._http()
        if http is not None:
            yield from http.metrics()
        yield from bus_families(self._bus)
        yield from notify_families(self._notifier)

    def describe(self) -> Iterable[Metric]:
        return []
