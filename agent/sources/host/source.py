"""The host source: /proc/stat, loadavg, meminfo and /proc/pressure."""

from __future__ import annotations

from agent.sources import Collector
from agent.sources.host import metrics, status
from agent.sources.host.part import HostPart
from agent.sources.host.rates import HostRates, host_rates
from agent.sources.registry import BuildContext, Source, register


def _build(ctx: BuildContext) -> Collector:
    from agent.sources.host.collector import HostCollector

    return HostCollector(ctx.cfg.agent.procfs)


SOURCE = register(
    Source(
        name="host",
        part_type=HostPart,
        build=_build,
        rates_type=HostRates,
        rates=host_rates,
        metrics=lambda cfg: metrics.render,
        status=status.summary,
        tcp_view=status.TCP_VIEW,
        status_lines=status.lines,
        order=10,
    )
)
