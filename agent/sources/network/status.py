"""The network source's keys of the status JSON, and its lines in ``training-node-agent status``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.core.projection import Each, Spec, fields
from agent.snapshot.summary import rounded, throughput_lines
from agent.sources.network.part import NetworkPart
from agent.sources.network.rates import NetworkRates

_RATES = fields("rx_bytes_per_second", "tx_bytes_per_second", "speed_bytes", "shaped_bytes", "rate_bytes")
TCP_VIEW: dict[str, Spec] = {"nics": Each(_RATES), "rdma": Each(_RATES)}


def summary(part: NetworkPart, r: NetworkRates) -> dict[str, Any]:
    return {
        "nics": {
            n.device: {
                "rx_bytes_per_second": rounded(r.nic_rx.get(n.device), 1),
                "tx_bytes_per_second": rounded(r.nic_tx.get(n.device), 1),
                "speed_bytes": n.speed_bytes,
                "shaped_bytes": n.shaped_bytes,
            }
            for n in part.nics
        },
        "rdma": {
            f"{p.device}/{p.port}": {
                "rx_bytes_per_second": rounded(r.rdma_rx.get((p.device, p.port)), 1),
                "tx_bytes_per_second": rounded(r.rdma_tx.get((p.device, p.port)), 1),
                "rate_bytes": p.rate_bytes,
            }
            for p in part.rdma
        },
    }


def lines(summarized: Mapping[str, Any]) -> list[str]:
    return throughput_lines(summarized, "nics") + throughput_lines(summarized, "rdma")
