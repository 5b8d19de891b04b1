"""Per-second rates from two consecutive snapshot parts.

A counter that goes backwards is a reset or a wrap (driver reload, interface re-created, 32-bit
counter wrapping): that interval yields no rate for that series instead of a negative one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

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
    # /proc/pressure: share of the interval some (resp. all non-idle) tasks stalled, per resource
    pressure_some_ratio: dict[str, float] = field(default_factory=dict)  # "cpu" | "io" | "memory"
    pressure_full_ratio: dict[str, float] = field(default_factory=dict)
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


def host_rates(prev: HostPart, cur: HostPart, dt: float) -> dict[str, object]:
    out = _pressure_rates(prev, cur, dt)
    if not (prev.cpu and cur.cpu):
        return out
    total = cur.cpu.total - prev.cpu.total
    if total <= 0:
        return out

    def share(a: float, b: float) -> float:
        return max(0.0, min(1.0, (a - b) / total))

    return {
        **out,
        "cpu_busy_ratio": share(cur.cpu.busy, prev.cpu.busy),
        "cpu_iowait_ratio": share(cur.cpu.iowait, prev.cpu.iowait),
        "cpu_steal_ratio": share(cur.cpu.steal, prev.cpu.steal),
    }


def _pressure_rates(prev: HostPart, cur: HostPart, dt: float) -> dict[str, object]:
    """PSI stall shares over the interval from the ``total`` counters (the kernel's avg10 lags)."""
    pairs = [(k, prev.pressure.get(k), p) for k, p in cur.pressure.items()]
    some = {k: counter_rate(a.some_total_seconds, b.some_total_seconds, dt) for k, a, b in pairs if a}
    full = {k: counter_rate(a.full_total_seconds, b.full_total_seconds, dt) for k, a, b in pairs if a}
    return {
        "pressure_some_ratio": {k: min(1.0, v) for k, v in some.items() if v is not None},
        "pressure_full_ratio": {k: min(1.0, v) for k, v in full.items() if v is not None},
    }


def storage_rates(prev: StoragePart, cur: StoragePart, dt: float) -> dict[str, object]:
    busy = _rates_by_key(prev.disks, cur.disks, _device, lambda d: d.io_time_seconds, dt)
    ops = _rates_by_key(prev.nfs, cur.nfs, _mountpoint, lambda m: m.read_ops, dt)
    rtt = _rates_by_key(prev.nfs, cur.nfs, _mountpoint, lambda m: m.read_rtt_seconds, dt)
    return {
        "disk_read": _rates_by_key(prev.disks, cur.disks, _device, _read_bytes, dt),
        "disk_busy_ratio": {k: min(1.0, v) for k, v in busy.items()},
        "nfs_read": _rates_by_key(prev.nfs, cur.nfs, _mountpoint, lambda m: m.server_read_bytes, dt),
        "nfs_read_ops": ops,
        "nfs_read_rtt_seconds": {k: rtt[k] / ops[k] for k in rtt if ops.get(k)},
    }


def network_rates(prev: NetworkPart, cur: NetworkPart, dt: float) -> dict[str, object]:
    return {
        "nic_rx": _rates_by_key(prev.nics, cur.nics, _device, lambda n: n.rx_bytes, dt),
        "nic_tx": _rates_by_key(prev.nics, cur.nics, _device, lambda n: n.tx_bytes, dt),
        "rdma_rx": _rates_by_key(prev.rdma, cur.rdma, _port, lambda p: p.rx_bytes, dt),
        "rdma_tx": _rates_by_key(prev.rdma, cur.rdma, _port, lambda p: p.tx_bytes, dt),
        "rdma_xmit_wait": _rates_by_key(prev.rdma, cur.rdma, _port, lambda p: p.xmit_wait, dt),
        "rdma_cnp": _rates_by_key(
            prev.rdma, cur.rdma, _port, lambda p: _sum_opt(p.cnp_sent, p.cnp_handled), dt
        ),
    }


def gpu_rates(prev: GpuPart, cur: GpuPart, dt: float) -> dict[str, object]:
    return {
        "gpu_pcie_rx": _rates_by_key(prev.gpus, cur.gpus, _index, lambda g: g.pcie_rx_bytes, dt),
        "gpu_pcie_tx": _rates_by_key(prev.gpus, cur.gpus, _index, lambda g: g.pcie_tx_bytes, dt),
        "gpu_nvlink_rx": _rates_by_key(prev.gpus, cur.gpus, _index, lambda g: g.nvlink_rx_bytes, dt),
        "gpu_nvlink_tx": _rates_by_key(prev.gpus, cur.gpus, _index, lambda g: g.nvlink_tx_bytes, dt),
    }


def process_rates(prev: ProcessPart, cur: ProcessPart, dt: float) -> dict[str, object]:
    # keyed by (pid, start time) so a reused pid never yields a rate against another process
    cpu = _rates_by_key(prev.processes, cur.processes, _proc_key, lambda p: p.cpu_seconds, dt)
    read = _rates_by_key(prev.processes, cur.processes, _proc_key, lambda p: p.rchar, dt)
    return {
        "process_cpu_cores": {pid: r for (pid, _), r in cpu.items()},
        "process_read": {pid: r for (pid, _), r in read.items()},
    }


FAMILY_RATES: dict[str, Callable[[Any, Any, float], dict[str, object]]] = {
    "host": host_rates,
    "storage": storage_rates,
    "network": network_rates,
    "gpu": gpu_rates,
    "processes": process_rates,
}


def family_rates(part_name: str, prev: Any, cur: Any, dt: float) -> dict[str, object]:
    """Rate fields of :class:`NodeRates` for one snapshot part; empty when there is no valid interval."""
    fn = FAMILY_RATES.get(part_name)
    if fn is None or prev is None or cur is None or dt <= 0:
        return {}
    return fn(prev, cur, dt)


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
