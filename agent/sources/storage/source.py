"""The storage source: block devices (/proc/diskstats) and NFS mounts (mountstats)."""

from __future__ import annotations

from agent.sources import Collector
from agent.sources.registry import BuildContext, Source, register
from agent.sources.storage import metrics, status
from agent.sources.storage.part import StoragePart
from agent.sources.storage.rates import StorageRates, storage_rates


def _build(ctx: BuildContext) -> Collector:
    st = ctx.cfg.storage
    from agent.sources.storage.collector import StorageCollector

    return StorageCollector(ctx.cfg.agent.procfs, st.device_exclude, st.mountstats_pid)


SOURCE = register(
    Source(
        name="storage",
        part_type=StoragePart,
        build=_build,
        config_section="storage",
        rates_type=StorageRates,
        rates=storage_rates,
        metrics=lambda cfg: metrics.render,
        status=status.summary,
        tcp_view=status.TCP_VIEW,
        status_lines=status.lines,
        order=30,
    )
)
