"""The network source's per-second rates: NIC and RDMA throughput, RDMA congestion."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import ClassVar

from agent.snapshot.rates import DEVICE, pairs, rates, sum_opt
from agent.sources.network.part import NetworkPart, RdmaPort

_PORT = attrgetter("device", "port")


@dataclass(frozen=True, slots=True)
class NetworkRates:
    source: ClassVar[str] = "network"  # its source: snap.rates.of(NetworkRates) finds it by this

    nic_rx: dict[str, float] = field(default_factory=dict)  # device -> bytes/s
    nic_tx: dict[str, float] = field(default_factory=dict)
    rdma_rx: dict[tuple[str, int], float] = field(default_factory=dict)  # (device, port)
    rdma_tx: dict[tuple[str, int], float] = field(default_factory=dict)
    rdma_xmit_wait: dict[tuple[str, int], float] = field(default_factory=dict)  # ticks/s
    rdma_cnp: dict[tuple[str, int], float] = field(default_factory=dict)  # CNPs sent+handled per s


def network_rates(prev: NetworkPart, cur: NetworkPart, dt: float) -> NetworkRates:
    nics = pairs(prev.nics, cur.nics, DEVICE)
    ports = pairs(prev.rdma, cur.rdma, _PORT)
    return NetworkRates(
        nic_rx=rates(nics, attrgetter("rx_bytes"), dt),
        nic_tx=rates(nics, attrgetter("tx_bytes"), dt),
        rdma_rx=rates(ports, attrgetter("rx_bytes"), dt),
        rdma_tx=rates(ports, attrgetter("tx_bytes"), dt),
        rdma_xmit_wait=rates(ports, attrgetter("xmit_wait"), dt),
        rdma_cnp=rates(ports, _cnp, dt),
    )


def _cnp(p: RdmaPort) -> int | None:
    return sum_opt(p.cnp_sent, p.cnp_handled)
