"""The network source: NICs (/proc/net/dev, /sys/class/net) and RDMA ports (/sys/class/infiniband)."""

from __future__ import annotations

from agent.sources import Collector
from agent.sources.network import metrics, status
from agent.sources.network.part import NetworkPart
from agent.sources.network.rates import NetworkRates, network_rates
from agent.sources.registry import BuildContext, Source, register


def _build(ctx: BuildContext) -> Collector:
    net = ctx.cfg.network
    from agent.sources.network.collector import NetworkCollector

    a = ctx.cfg.agent
    return NetworkCollector(a.procfs, a.sysfs, net.device_exclude, net.capacity, rdma=net.rdma)


SOURCE = register(
    Source(
        name="network",
        part_type=NetworkPart,
        build=_build,
        config_section="network",
        rates_type=NetworkRates,
        rates=network_rates,
        metrics=lambda cfg: metrics.render,
        status=status.summary,
        tcp_view=status.TCP_VIEW,
        status_lines=status.lines,
        order=40,
    )
)
