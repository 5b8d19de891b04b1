"""Per-second rates from two consecutive snapshot parts.

A counter that goes backwards is a reset or a wrap (driver reload, interface re-created, 32-bit
counter wrapping): that interval yields no rate for that series instead of a negative one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from agent.snapshot.parts import GpuPart, HostPart, NetworkPart, ProcessPart, StoragePart

K = TypeVar("K")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NodeRates:
    interval_seconds: float = 0.0
    # host, ratios of all CPU time in the interval
    cpu_busy_ratio: float | None = None
    cpu_iowait_ratio: float | None = None
    cpu_steal_ratio: float | None = None
    # bytes per second, keyed like the metrics' labels
    disk_read: dict[str, float] = field(default_factory=dict)  # device
    disk_busy_ratio: dict[str, float] = field(default_factory=dict)  # device, io_time share
    nfs_read: dict[str, float] = field(default_factory=dict)  # mountpoint, from the server
    nfs_read_ops: dict[str, float] = field(default_factory=dict)  # mountpoint, READ ops/s
    nfs_read_rtt_seconds: dict[str, float] = field(default_factory=dict)  # mountpoint, mean RTT per READ
    nic_rx: dict[str, float] = field(default_factory=dict)  # device
    nic_tx: dict[str, float] = field(default_factory=dict)
    rdma_rx: dict[tuple[str, int], float] = field(default_factory=dict)  # (device, port)
    rdma_tx: dict[tuple[str, int], float] = field(default_factory=dict)
    rdma_xmit_wait: dict[tuple[str, int], float] = field(default_factory=dict)  # ticks/s
    rdma_cnp: dict[tuple[str, int], float] = field(default_factory=dict)  # CNPs sent+handled per s
    gpu_pcie_rx: dict[int, float] = field(default_factory=dict)  # gpu index
    gpu_pcie_tx: dict[int, float] = field(default_factory=dict)
    gpu_nvlink_rx: dict[int, float] = field(default_factory=dict)
    gpu_nvlink_tx: dict[int, float] = field(default_factory=dict)
    process_cpu_cores: dict[int, float] = field(default_factory=dict)  # pid -> cores used (tree)
    process_read: dict[int, float] = field(default_factory=dict)  # pid -> bytes/s (rchar, tree)


def counter_rate(prev: float | None, cur: float | None, seconds: float) -> float | None:
    """Rate of a cumulative counter; ``None`` for a reset, a gap or a zero interval."""
    if prev is None or cur is None or seconds <= 0 or cur < prev:
        return None
    return (cur - prev) / seconds


def _rates_by_key(
    prev: Iterable[T], cur: Iterable[T], key: Callable[[T], K], value: Callable[[T], float | None], dt: float
) -> dict[K, float]:
    before = {key(item): value(item) for item in prev}
    out: dict[K, float] = {}
    for item in cur:
        k = key(item)
        if k in before:
            r = counter_rate(before[k], value(item), dt)
            if r is not None:
                out[k] = r
    return out


def _sum_opt(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def compute_rates(
    dt: float,
    prev_host: HostPart | None,
    host: HostPart | None,
    prev_gpu: GpuPart | None,
    gpu: GpuPart | None,
    prev_storage: StoragePart | None,
    storage: StoragePart | None,
    prev_network: NetworkPart | None,
    network: NetworkPart | None,
    prev_processes: ProcessPart | None,
    processes: ProcessPart | None,
) -> NodeRates:
    if dt <= 0:
        return NodeRates()
    kw: dict[str, object] = {"interval_seconds": dt}
    if prev_host and host and prev_host.cpu and host.cpu:
        total = host.cpu.total - prev_host.cpu.total
        if total > 0:
            kw["cpu_busy_ratio"] = max(0.0, min(1.0, (host.cpu.busy - prev_host.cpu.busy) / total))
            kw["cpu_iowait_ratio"] = max(0.0, min(1.0, (host.cpu.iowait - prev_host.cpu.iowait) / total))
            kw["cpu_steal_ratio"] = max(0.0, min(1.0, (host.cpu.steal - prev_host.cpu.steal) / total))
    if prev_storage and storage:
        kw["disk_read"] = _rates_by_key(prev_storage.disks, storage.disks, _device, _read_bytes, dt)
        kw["disk_busy_ratio"] = {
            k: min(1.0, v)
            for k, v in _rates_by_key(
                prev_storage.disks, storage.disks, _device, lambda d: d.io_time_seconds, dt
            ).items()
        }
        kw["nfs_read"] = _rates_by_key(
            prev_storage.nfs, storage.nfs, _mountpoint, lambda m: m.server_read_bytes, dt
        )
        ops = _rates_by_key(prev_storage.nfs, storage.nfs, _mountpoint, lambda m: m.read_ops, dt)
        kw["nfs_read_ops"] = ops
        rtt = _rates_by_key(prev_storage.nfs, storage.nfs, _mountpoint, lambda m: m.read_rtt_seconds, dt)
        kw["nfs_read_rtt_seconds"] = {k: rtt[k] / ops[k] for k in rtt if ops.get(k)}
    if prev_network and network:
        kw["nic_rx"] = _rates_by_key(prev_network.nics, network.nics, _device, lambda n: n.rx_bytes, dt)
        kw["nic_tx"] = _rates_by_key(prev_network.nics, network.nics, _device, lambda n: n.tx_bytes, dt)
        kw["rdma_rx"] = _rates_by_key(prev_network.rdma, network.rdma, _port, lambda p: p.rx_bytes, dt)
        kw["rdma_tx"] = _rates_by_key(prev_network.rdma, network.rdma, _port, lambda p: p.tx_bytes, dt)
        kw["rdma_xmit_wait"] = _rates_by_key(
            prev_network.rdma, network.rdma, _port, lambda p: p.xmit_wait, dt
        )
        kw["rdma_cnp"] = _rates_by_key(
            prev_network.rdma, network.rdma, _port, lambda p: _sum_opt(p.cnp_sent, p.cnp_handled), dt
        )
    if prev_gpu and gpu:
        kw["gpu_pcie_rx"] = _rates_by_key(prev_gpu.gpus, gpu.gpus, _index, lambda g: g.pcie_rx_bytes, dt)
        kw["gpu_pcie_tx"] = _rates_by_key(prev_gpu.gpus, gpu.gpus, _index, lambda g: g.pcie_tx_bytes, dt)
        kw["gpu_nvlink_rx"] = _rates_by_key(prev_gpu.gpus, gpu.gpus, _index, lambda g: g.nvlink_rx_bytes, dt)
        kw["gpu_nvlink_tx"] = _rates_by_key(prev_gpu.gpus, gpu.gpus, _index, lambda g: g.nvlink_tx_bytes, dt)
    if prev_processes and processes:
        # keyed by (pid, start time) so a reused pid never yields a rate against another process
        same = {(p.pid, p.start_time_ticks) for p in prev_processes.processes}
        prev_p = [p for p in prev_processes.processes if (p.pid, p.start_time_ticks) in same]
        cur_p = [p for p in processes.processes if (p.pid, p.start_time_ticks) in same]
        kw["process_cpu_cores"] = {
            pid: r
            for (pid, _), r in _rates_by_key(prev_p, cur_p, _proc_key, lambda p: p.cpu_seconds, dt).items()
        }
        kw["process_read"] = {
            pid: r for (pid, _), r in _rates_by_key(prev_p, cur_p, _proc_key, lambda p: p.rchar, dt).items()
        }
    return NodeRates(**kw)  # type: ignore[arg-type]


def _device(x) -> str:
    return x.device


def _read_bytes(d) -> int:
    return d.read_bytes


def _mountpoint(m) -> str:
    return m.mountpoint


def _port(p) -> tuple[str, int]:
    return (p.device, p.port)


def _index(g) -> int:
    return g.index


def _proc_key(p) -> tuple[int, int]:
    return (p.pid, p.start_time_ticks)
