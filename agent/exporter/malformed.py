"""training_node_collector_malformed_lines_total: input lines each collector skipped as malformed."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, Metric

from agent.snapshot import NodeSnapshot

PARTS = ("storage", "network", "processes")


def render(snap: NodeSnapshot) -> Iterable[Metric]:
    fam = CounterMetricFamily(
        "training_node_collector_malformed_lines",
        "Lines or files from /proc and /sys skipped because they could not be parsed, since start.",
        labels=["collector"],
    )
    for name in PARTS:
        part = getattr(snap, name)
        if part is not None:
            fam.add_metric([name], part.malformed_lines_total)
    yield fam
