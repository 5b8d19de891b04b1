"""The trainer source: what ``tna_client`` in the training process says of its own pauses."""

from __future__ import annotations

from pathlib import Path

from agent.sources import Collector
from agent.sources.registry import BuildContext, Source, register
from agent.sources.trainer import status
from agent.sources.trainer.part import TrainerPart
from agent.sources.trainer.rates import TrainerRates, trainer_rates


def _build(ctx: BuildContext) -> Collector:
    from agent.sources.trainer.collector import TrainerCollector

    directory = ctx.cfg.trainer.request_path(Path(ctx.cfg.agent.runtime_dir)).parent
    return TrainerCollector(directory, ctx.cfg.agent.procfs)


SOURCE = register(
    Source(
        name="trainer",
        part_type=TrainerPart,
        build=_build,
        rates_type=TrainerRates,
        rates=trainer_rates,
        status=status.summary,
        tcp_view=status.TCP_VIEW,
        status_lines=status.lines,
        order=70,
    )
)
