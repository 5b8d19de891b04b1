"""The host source's keys of the status JSON, and its lines in ``training-node-agent status``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.core.projection import Spec, fields
from agent.snapshot.summary import pct, rounded
from agent.sources.host.part import HostPart
from agent.sources.host.rates import HostRates

TCP_VIEW: dict[str, Spec] = {
    "host": fields(
        "cpus",
        "cpu_busy_ratio",
        "cpu_iowait_ratio",
        "cpu_steal_ratio",
        "load1",
        "memory_total_bytes",
        "memory_available_bytes",
        "pressure_some_avg10",
    )
}


def summary(host: HostPart, r: HostRates) -> dict[str, Any]:
    return {
        "host": {
            "cpus": host.cpu_count,
            "cpu_busy_ratio": rounded(r.cpu_busy_ratio),
            "cpu_iowait_ratio": rounded(r.cpu_iowait_ratio),
            "cpu_steal_ratio": rounded(r.cpu_steal_ratio),
            "load1": host.load1,
            "memory_total_bytes": host.memory_total_bytes,
            "memory_available_bytes": host.memory_available_bytes,
            "pressure_some_avg10": {k: p.some_avg10 for k, p in host.pressure.items()},
        }
    }


def lines(summarized: Mapping[str, Any]) -> list[str]:
    host = summarized.get("host")
    if not host:
        return []
    return [
        "\n[host]",
        f"  cpus {host['cpus']}  busy {pct(host.get('cpu_busy_ratio'))}  "
        f"iowait {pct(host.get('cpu_iowait_ratio'))}  steal {pct(host.get('cpu_steal_ratio'))}  "
        f"load1 {host.get('load1')}",
    ]
