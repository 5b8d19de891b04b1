"""The GPU source: NVML, one entry per GPU, and the Xid event thread."""

from __future__ import annotations

from functools import partial

from agent.sources import Collector
from agent.sources.gpu import metrics, status
from agent.sources.gpu.part import GpuPart
from agent.sources.gpu.rates import GpuRates, gpu_rates
from agent.sources.registry import BuildContext, Source, register


def _build(ctx: BuildContext) -> Collector:
    gpu = ctx.cfg.gpu
    from agent.sources.gpu.probe import NvmlProbe

    # the GPUs that answer come back before the sampler gives the whole collector up
    call_timeout = min(gpu.call_timeout, ctx.cfg.agent.collector_timeout / 2)
    return NvmlProbe(gpu.library, gpu.reinit_backoff_max, gpu.xid_events, call_timeout)


SOURCE = register(
    Source(
        name="gpu",
        part_type=GpuPart,
        build=_build,
        config_section="gpu",
        rates_type=GpuRates,
        rates=gpu_rates,
        metrics=lambda cfg: partial(metrics.render, processes=cfg.gpu.process_metrics),
        status=status.summary,
        tcp_view=status.TCP_VIEW,
        status_lines=status.lines,
        order=20,
    )
)
