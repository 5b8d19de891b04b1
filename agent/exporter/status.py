"""The JSON summary of a snapshot served by /api/v1/status and the control socket, and the
network view of the daemon's status.

The control socket (local, mode 0660) answers the full status. The TCP port answers
:func:`tcp_view` of it: an allowlist, so a field that a new part adds stays off the network until
it is listed here (docs/security.md lists the same fields; a test keeps the two equal).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, TypeAlias

from agent.snapshot import NodeSnapshot


def _round(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def summarize(snap: NodeSnapshot) -> dict[str, Any]:
    r = snap.rates
    out: dict[str, Any] = {
        "seq": snap.seq,
        "timestamp": snap.timestamp,
        "collectors": {name: asdict(st) for name, st in sorted(snap.collectors.items())},
    }
    if snap.host is not None:
        out["host"] = {
            "cpus": snap.host.cpu_count,
            "cpu_busy_ratio": _round(r.cpu_busy_ratio),
            "cpu_iowait_ratio": _round(r.cpu_iowait_ratio),
            "cpu_steal_ratio": _round(r.cpu_steal_ratio),
            "load1": snap.host.load1,
            "memory_total_bytes": snap.host.memory_total_bytes,
            "memory_available_bytes": snap.host.memory_available_bytes,
            "pressure_some_avg10": {k: p.some_avg10 for k, p in snap.host.pressure.items()},
        }
    if snap.gpu is not None:
        out["gpus"] = [
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
                "pcie_rx_bytes_per_second": _round(r.gpu_pcie_rx.get(g.index), 1),
                "pcie_tx_bytes_per_second": _round(r.gpu_pcie_tx.get(g.index), 1),
                "nvlink_rx_bytes_per_second": _round(r.gpu_nvlink_rx.get(g.index), 1),
                "nvlink_tx_bytes_per_second": _round(r.gpu_nvlink_tx.get(g.index), 1),
                "processes": [{"pid": p.pid, "used_memory_bytes": p.used_memory_bytes} for p in g.processes],
                "xid_counts": {str(k): v for k, v in g.xid_counts.items()},
            }
            for g in snap.gpu.gpus
        ]
        out["driver_version"] = snap.gpu.driver_version
        out["nvml_version"] = snap.gpu.nvml_version
    if snap.storage is not None:
        out["disks"] = {
            d.device: {
                "read_bytes_per_second": _round(r.disk_read.get(d.device), 1),
                "busy_ratio": _round(r.disk_busy_ratio.get(d.device)),
            }
            for d in snap.storage.disks
        }
        out["nfs"] = {
            m.mountpoint: {
                "export": m.export,
                "read_bytes_per_second": _round(r.nfs_read.get(m.mountpoint), 1),
                "read_ops_per_second": _round(r.nfs_read_ops.get(m.mountpoint), 2),
                "read_rtt_seconds": _round(r.nfs_read_rtt_seconds.get(m.mountpoint), 6),
            }
            for m in snap.storage.nfs
        }
    if snap.network is not None:
        out["nics"] = {
            n.device: {
                "rx_bytes_per_second": _round(r.nic_rx.get(n.device), 1),
                "tx_bytes_per_second": _round(r.nic_tx.get(n.device), 1),
                "speed_bytes": n.speed_bytes,
            }
            for n in snap.network.nics
        }
        out["rdma"] = {
            f"{p.device}/{p.port}": {
                "rx_bytes_per_second": _round(r.rdma_rx.get((p.device, p.port)), 1),
                "tx_bytes_per_second": _round(r.rdma_tx.get((p.device, p.port)), 1),
                "rate_bytes": p.rate_bytes,
            }
            for p in snap.network.rdma
        }
    if snap.processes is not None:
        out["training_processes"] = [
            {
                "pid": p.pid,
                "comm": p.comm,
                "cpu_cores": _round(r.process_cpu_cores.get(p.pid)),
                "allowed_cores": p.allowed_cores,
                "read_bytes_per_second": _round(r.process_read.get(p.pid), 1),
                "descendants": p.descendants,
            }
            for p in snap.processes.processes
        ]
    return out


# --- the network view ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Each:
    """The spec applies to every value of a mapping (its keys are kept) or item of a list."""

    spec: Spec


Spec: TypeAlias = "bool | dict[str, Spec] | Each"
KEEP = True


def _fields(*names: str) -> dict[str, Spec]:
    return dict.fromkeys(names, KEEP)


_EPISODE = _fields("event_id", "kind", "provider", "phase", "drill", "deadline", "duration_seconds")
_RATES = _fields("rx_bytes_per_second", "tx_bytes_per_second", "speed_bytes", "rate_bytes")

# What a network neighbour may read. Left out on purpose: the config path, task errors, collector
# errors, GPU process PIDs, training processes' PIDs and names, NFS exports, everything about
# checkpoint discovery (command-line patterns, pid files, cgroups), the request file, the
# checkpoint targets and acks (paths), the metadata endpoint, token state and raw notices, alert
# channels' URLs, the spool path, the recent events, and every human-readable "lines" list (they
# quote all of the above).
TCP_VIEW: dict[str, Spec] = {
    **_fields("version", "uptime_seconds", "healthy", "health_reason", "reloads"),
    "tasks": Each(_fields("running", "restarts")),
    "http": _fields("scheme"),
    "snapshot": {
        **_fields("seq", "timestamp", "driver_version", "nvml_version"),
        "collectors": Each(_fields("success", "absent", "duration_seconds")),
        "host": _fields(
            "cpus",
            "cpu_busy_ratio",
            "cpu_iowait_ratio",
            "cpu_steal_ratio",
            "load1",
            "memory_total_bytes",
            "memory_available_bytes",
            "pressure_some_avg10",
        ),
        "gpus": Each(
            _fields(
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
        "disks": Each(_fields("read_bytes_per_second", "busy_ratio")),
        "nfs": Each(_fields("read_bytes_per_second", "read_ops_per_second", "read_rtt_seconds")),
        "nics": Each(_RATES),
        "rdma": Each(_RATES),
        "training_processes": Each(
            _fields("cpu_cores", "allowed_cores", "read_bytes_per_second", "descendants")
        ),
    },
    "classifier": _fields(
        "verdict",
        "sub_reason",
        "since",
        "since_seconds",
        "reasons",
        "hint",
        "health",
        "scores",
        "vote",
        "held",
        "candidate",
        "candidate_count",
        "changes_total",
        "evaluations",
        "window_seconds",
        "window_samples",
        "published",
    ),
    "preemption": {
        **_fields("provider", "selected_by", "enabled", "instance", "requests"),
        "active": Each(
            _fields(
                "event_id",
                "provider",
                "kind",
                "deadline",
                "received_at",
                "seconds_remaining_at_receipt",
                "remaining_seconds",
            )
        ),
    },
    "checkpoint": {
        **_fields("signal", "dry_run"),
        "targets": Each(_fields("source", "handler")),
        "active": Each(_EPISODE),
        "recent": Each(_EPISODE),
    },
    "gpu-health": _fields("lost", "throttled", "events"),
    "alerts": {
        **_fields("active", "held"),
        "channels": Each(_fields("type", "state", "queued", "sent", "messages", "failed", "dropped")),
    },
}


def project(value: Any, spec: Spec) -> Any:
    """``value`` cut down to what ``spec`` lists; unlisted keys are dropped."""
    if spec is True:
        return value
    if isinstance(spec, Each):
        if isinstance(value, dict):
            return {k: project(v, spec.spec) for k, v in value.items()}
        if isinstance(value, list):
            return [project(v, spec.spec) for v in value]
        return None
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return None
        return {k: project(value[k], sub) for k, sub in spec.items() if k in value}
    return None


def tcp_view(full: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = project(full, TCP_VIEW)
    return out


def spec_paths(spec: Spec = TCP_VIEW, prefix: str = "") -> list[str]:
    """Every field the spec shows, as ``snapshot.gpus[].model`` (``[]``: each item or value)."""
    if spec is True:
        return [prefix]
    if isinstance(spec, Each):
        return spec_paths(spec.spec, prefix + "[]")
    if not isinstance(spec, dict):
        return []
    out: list[str] = []
    for k, sub in spec.items():
        out += spec_paths(sub, f"{prefix}.{k}" if prefix else k)
    return out
