"""The JSON summary of a snapshot served by /api/v1/status and the control socket."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

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
