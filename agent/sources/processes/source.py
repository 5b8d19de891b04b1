"""The processes source: the training processes and their descendants (data-loader workers)."""

from __future__ import annotations

from agent.sources import Collector
from agent.sources.processes import metrics, status
from agent.sources.processes.part import ProcessPart
from agent.sources.processes.rates import ProcessRates, process_rates
from agent.sources.registry import BuildContext, Source, register


def _build(ctx: BuildContext) -> Collector:
    from agent.sources.processes.collector import ProcessCollector

    return ProcessCollector(ctx.cfg.agent.procfs, ctx.cfg.agent.sysfs, ctx.training_pids)


SOURCE = register(
    Source(
        name="processes",
        part_type=ProcessPart,
        build=_build,
        rates_type=ProcessRates,
        rates=process_rates,
        metrics=lambda cfg: metrics.render,
        status=status.summary,
        status_lines=status.lines,
        tcp_view=status.TCP_VIEW,
        order=50,
    )
)
