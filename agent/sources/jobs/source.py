"""The jobs source: which scheduler job each training process (and so each GPU) belongs to.

A source rather than a part of its own: like the other sources it reads the node (``/proc``, and
``scontrol`` through its own worker thread) and hands the sampler a frozen part each tick, so the
ledger books a tick's GPU-seconds by the jobs of that very snapshot, and the exporter, status,
``top`` and the alerts read the same record."""

from __future__ import annotations

import structlog

from agent.sources import Collector
from agent.sources.jobs import metrics, status
from agent.sources.jobs.part import JobPart
from agent.sources.registry import BuildContext, Source, register

log = structlog.get_logger("jobs")


def _build(ctx: BuildContext) -> Collector:
    from agent.sources.jobs.collector import JobCollector
    from agent.sources.jobs.scontrol import JobLookup

    c = ctx.cfg.jobs
    if c.node_name:
        log.warning(
            "[jobs] node_name is deprecated: set [scheduler] node_name, which the jobs source reads too"
        )
    return JobCollector(
        ctx.cfg.agent.procfs,
        ctx.training_pids,
        JobLookup(c.scontrol, c.timeout, c.refresh, c.max_jobs, ctx.cfg.node_name),
    )


SOURCE = register(
    Source(
        name="jobs",
        part_type=JobPart,
        build=_build,
        config_section="jobs",
        metrics=lambda cfg: metrics.render,
        status=status.summary,
        status_lines=status.lines,
        tcp_view=status.TCP_VIEW,
        order=55,
    )
)
