"""The GPU source's keys of the status JSON, and its lines in ``training-node-agent status``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.core.projection import Each, Spec, fields
from agent.snapshot.summary import pct, rounded
from agent.sources.gpu.part import FIGURES, GpuPart, GpuStats
from agent.sources.gpu.rates import GpuRates

# each figure's status key (part.py declares them), beside what the status shows by hand
STATUS_FIGURES: tuple[tuple[str, str], ...] = tuple(
    (name, key) for name, fig in FIGURES if (key := fig.status_key()) is not None
)
RATES = (
    ("pcie_rx_bytes_per_second", "gpu_pcie_rx"),
    ("pcie_tx_bytes_per_second", "gpu_pcie_tx"),
    ("nvlink_rx_bytes_per_second", "gpu_nvlink_rx"),
    ("nvlink_tx_bytes_per_second", "gpu_nvlink_tx"),
)

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
            *(key for _, key in STATUS_FIGURES),
            *(key for key, _ in RATES),
            "xid_counts",
            "nvlink_errors",
            "clocks_event_share",
            "readings",
        )
    ),
}


def _gpu(g: GpuStats, r: GpuRates) -> dict[str, Any]:
    out: dict[str, Any] = {
        "index": g.index,
        "uuid": g.uuid,
        "model": g.model,
        "up": g.up,
        "pci_bus_id": g.pci_bus_id,
    }
    for name, key in STATUS_FIGURES:
        out[key] = getattr(g, name)
    for key, rate in RATES:
        out[key] = rounded(getattr(r, rate).get(g.index), 1)
    out["processes"] = [{"pid": p.pid, "used_memory_bytes": p.used_memory_bytes} for p in g.processes]
    out["xid_counts"] = {str(k): v for k, v in g.xid_counts.items()}
    out["nvlink_errors"] = {str(k): v for k, v in g.nvlink_errors.items()}
    out["clocks_event_share"] = {r.label: round(s, 3) for r, s in g.clocks_event_share.items()}
    out["readings"] = {
        "utilization": str(g.utilization_source),
        "utilization_samples": g.utilization_samples,
        "power": str(g.power_source),
        "clocks_events": str(g.clocks_event_source),
        "activity": _activity(g),
        "activity_windows": len(g.activity_windows) or None,
    }
    return out


def _activity(g: GpuStats) -> str:
    """Where the tick's SM and graphics activity came from: GPM over windows inside the tick, GPM
    between the ticks' own samples, or nothing (no GPM: the classifier weighs power instead)."""
    if g.activity_windows:
        return "gpm-windows"
    if g.sm_active is not None or g.tensor_active is not None or g.graphics_active is not None:
        return "gpm"
    return "none"


def summary(part: GpuPart, r: GpuRates) -> dict[str, Any]:
    return {
        "gpus": [_gpu(g, r) for g in part.gpus],
        "driver_version": part.driver_version,
        "nvml_version": part.nvml_version,
    }


def lines(summarized: Mapping[str, Any]) -> list[str]:
    gpus = summarized.get("gpus")
    if gpus:
        out = [f"\n[gpus] driver {summarized.get('driver_version')}"]
        for g in gpus:
            state = "up" if g["up"] else "HUNG" if g.get("unresponsive_seconds") is not None else "LOST"
            power = g.get("power_watts")
            limit = g.get("power_limit_watts")
            out.append(
                f"  {g['index']} {g['model']:<24} {state:<4} util {pct(g.get('utilization_ratio'))}"
                f"  sm {pct(g.get('sm_active_ratio'))}"
                f"  power {power if power is not None else '-'}/{limit if limit is not None else '-'} W"
                f"  procs {len(g.get('processes', []))}"
                f"  ({_sources(g.get('readings'))})"
            )
        return out
    if "collectors" in summarized and "gpu" in summarized["collectors"]:
        return [f"\n[gpus] none visible: {summarized['collectors']['gpu'].get('error')}"]
    return []


def _sources(readings: Mapping[str, Any] | None) -> str:
    """Where this tick's utilization and power came from, in the status line."""
    if not readings:
        return "sources unknown"
    count = readings.get("utilization_samples")
    util = readings.get("utilization")
    util = f"{util} x{count}" if count else util
    events = readings.get("clocks_events")
    clocks = f", clock events from {events}" if events and events != "none" else ""
    activity = readings.get("activity")
    windows = readings.get("activity_windows")
    sm = f", sm from {activity} x{windows}" if windows else f", sm from {activity}" if activity else ""
    return f"util from {util}, power from {readings.get('power')}{sm}{clocks}"
