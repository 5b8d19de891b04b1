"""training_node_collector_malformed_lines_total: input lines each collector skipped as malformed."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, Metric

from agent.snapshot import NodeSnapshot
from agent.sources import registry


def render(snap: NodeSnapshot) -> Iterable[Metric]:
    fam = CounterMetricFamily(
        "training_node_collector_malformed_lines",
        "Lines or files from /proc and /sys skipped because they could not be parsed, since start.",
        labels=["collector"],
    )
    for source in registry.sources():
        # the parts of the sources that parse kernel text count what they skipped
        total = getattr(snap.parts.get(source.name), "malformed_lines_total", None)
        if total is not None:
            fam.add_metric([source.name], total)
    yield fam
