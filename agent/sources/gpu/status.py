"""The GPU source's keys of the status JSON, and its lines in ``training-node-agent status``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.core.projection import Each, Spec, fields
from agent.snapshot.summary import pct, rounded
from agent.sources.gpu.part import GpuPart
from agent.sources.gpu.rates import GpuRates

# GPU process PIDs stay off the network
TCP_VIEW: dict[str, Spec] = {
    **fields("driver_version", "nvml_version"),
    "gpus": Each(
        fields(
            "index",
            "uuid",
            "model",
            "up",
            "pci_bus_id",
            "utilization_ratio",
            "memory_utilization_ratio",
            "memory_used_bytes",
            "memory_total_bytes",
            "power_watts",
            "power_limit_watts",
            "temperature_celsius",
            "sm_active_ratio",
            "tensor_active_ratio",
            "dram_active_ratio",
            "sm_clock_hertz",
            "clocks_event_reasons",
            "ecc_uncorrected_total",
            "row_remap_failure",
            "pcie_rx_bytes_per_second",
            "pcie_tx_bytes_per_second",
            "nvlink_rx_bytes_per_second",
            "nvlink_tx_bytes_per_second",
            "xid_counts",
        )
    ),
}


def summary(part: GpuPart, r: GpuRates) -> dict[str, Any]:
    gpus = [
        {
            "index": g.index,
            "uuid": g.uuid,
            "model": g.model,
            "up": g.up,
            "pci_bus_id": g.pci_bus_id,
            "utilization_ratio": g.utilization,
            "memory_utilization_ratio": g.memory_utilization,
            "memory_used_bytes": g.memory_used_bytes,
            "memory_total_bytes": g.memory_total_bytes,
            "power_watts": g.power_watts,
            "power_limit_watts": g.power_limit_watts,
            "temperature_celsius": g.temperature_celsius,
            "sm_active_ratio": g.sm_active,
            "tensor_active_ratio": g.tensor_active,
            "dram_active_ratio": g.dram_active,
            "sm_clock_hertz": g.sm_clock_hertz,
            "clocks_event_reasons": g.clocks_event_reasons,
            "ecc_uncorrected_total": g.ecc_uncorrected_total,
            "row_remap_failure": g.row_remap_failure,
            "pcie_rx_bytes_per_second": rounded(r.gpu_pcie_rx.get(g.index), 1),
            "pcie_tx_bytes_per_second": rounded(r.gpu_pcie_tx.get(g.index), 1),
            "nvlink_rx_bytes_per_second": rounded(r.gpu_nvlink_rx.get(g.index), 1),
            "nvlink_tx_bytes_per_second": rounded(r.gpu_nvlink_tx.get(g.index), 1),
            "processes": [{"pid": p.pid, "used_memory_bytes": p.used_memory_bytes} for p in g.processes],
            "xid_counts": {str(k): v for k, v in g.xid_counts.items()},
        }
        for g in part.gpus
    ]
    return {"gpus": gpus, "driver_version": part.driver_version, "nvml_version": part.nvml_version}


def lines(summarized: Mapping[str, Any]) -> list[str]:
    gpus = summarized.get("gpus")
    if gpus:
        out = [f"\n[gpus] driver {summarized.get('driver_version')}"]
        for g in gpus:
            state = "up" if g["up"] else "LOST"
            power = g.get("power_watts")
            limit = g.get("power_limit_watts")
            out.append(
                f"  {g['index']} {g['model']:<24} {state:<4} util {pct(g.get('utilization_ratio'))}"
                f"  sm {pct(g.get('sm_active_ratio'))}"
                f"  power {power if power is not None else '-'}/{limit if limit is not None else '-'} W"
                f"  procs {len(g.get('processes', []))}"
            )
        return out
    if "collectors" in summarized and "gpu" in summarized["collectors"]:
        return [f"\n[gpus] none visible: {summarized['collectors']['gpu'].get('error')}"]
    return []
