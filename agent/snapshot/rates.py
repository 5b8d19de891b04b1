"""Per-second rates from two consecutive snapshot parts.

A counter that goes backwards is a reset or a wrap (driver reload, interface re-created, 32-bit
counter wrapping): that interval yields no rate for that series instead of a negative one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, TypeVar

from agent.snapshot.parts import GpuPart, HostPart, NetworkPart, ProcessPart, RdmaPort, StoragePart

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
    # pid -> bytes/s fetched from storage (read_bytes, tree): counts mmap'd datasets that rchar misses
    process_storage_read: dict[int, float] = field(default_factory=dict)


def counter_rate(prev: float | None, cur: float | None, seconds: float) -> float | None:
    """Rate of a cumulative counter; ``None`` for a reset, a gap or a zero interval."""
    if prev is None or cur is None or seconds <= 0 or cur < prev:
        return None
    return (cur - prev) / seconds


def _pairs(prev: Iterable[T], cur: Iterable[T], key: Callable[[T], K]) -> list[tuple[K, T, T]]:
    """``(key, before, now)`` for each item of ``cur`` that ``prev`` has too; matched once per part,
    then every counter of the part is read from the pairs (this runs on the event loop every tick)."""
    before = {key(item): item for item in prev}
    return [(k, before[k], item) for item in cur if (k := key(item)) in before]


def _rates(pairs: list[tuple[K, T, T]], value: Callable[[T], float | None], dt: float) -> dict[K, float]:
    out: dict[K, float] = {}
    if dt <= 0:
        return out
    for k, a, b in pairs:
        x, y = value(a), value(b)
        if x is not None and y is not None and y >= x:  # counter_rate, inlined: ~200 calls a tick
            out[k] = (y - x) / dt
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
    disks = _pairs(prev.disks, cur.disks, _DEVICE)
    mounts = _pairs(prev.nfs, cur.nfs, _MOUNTPOINT)
    busy = _rates(disks, attrgetter("io_time_seconds"), dt)
    ops = _rates(mounts, attrgetter("read_ops"), dt)
    rtt = _rates(mounts, attrgetter("read_rtt_seconds"), dt)
    return {
        "disk_read": _rates(disks, attrgetter("read_bytes"), dt),
        "disk_busy_ratio": {k: min(1.0, v) for k, v in busy.items()},
        "nfs_read": _rates(mounts, attrgetter("server_read_bytes"), dt),
        "nfs_read_ops": ops,
        "nfs_read_rtt_seconds": {k: rtt[k] / ops[k] for k in rtt if ops.get(k)},
    }


def network_rates(prev: NetworkPart, cur: NetworkPart, dt: float) -> dict[str, object]:
    nics = _pairs(prev.nics, cur.nics, _DEVICE)
    ports = _pairs(prev.rdma, cur.rdma, _PORT)
    return {
        "nic_rx": _rates(nics, attrgetter("rx_bytes"), dt),
        "nic_tx": _rates(nics, attrgetter("tx_bytes"), dt),
        "rdma_rx": _rates(ports, attrgetter("rx_bytes"), dt),
        "rdma_tx": _rates(ports, attrgetter("tx_bytes"), dt),
        "rdma_xmit_wait": _rates(ports, attrgetter("xmit_wait"), dt),
        "rdma_cnp": _rates(ports, _cnp, dt),
    }


def gpu_rates(prev: GpuPart, cur: GpuPart, dt: float) -> dict[str, object]:
    gpus = _pairs(prev.gpus, cur.gpus, _INDEX)
    return {
        "gpu_pcie_rx": _rates(gpus, attrgetter("pcie_rx_bytes"), dt),
        "gpu_pcie_tx": _rates(gpus, attrgetter("pcie_tx_bytes"), dt),
        "gpu_nvlink_rx": _rates(gpus, attrgetter("nvlink_rx_bytes"), dt),
        "gpu_nvlink_tx": _rates(gpus, attrgetter("nvlink_tx_bytes"), dt),
    }


def process_rates(prev: ProcessPart, cur: ProcessPart, dt: float) -> dict[str, object]:
    # keyed by (pid, start time) so a reused pid never yields a rate against another process
    procs = _pairs(prev.processes, cur.processes, _PROC_KEY)
    cpu = _rates(procs, attrgetter("cpu_seconds"), dt)
    read = _rates(procs, attrgetter("rchar"), dt)
    storage = _rates(procs, attrgetter("read_bytes"), dt)
    return {
        "process_cpu_cores": {pid: r for (pid, _), r in cpu.items()},
        "process_read": {pid: r for (pid, _), r in read.items()},
        "process_storage_read": {pid: r for (pid, _), r in storage.items()},
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


def _cnp(p: RdmaPort) -> int | None:
    return _sum_opt(p.cnp_sent, p.cnp_handled)


_DEVICE = attrgetter("device")
_MOUNTPOINT = attrgetter("mountpoint")
_PORT = attrgetter("device", "port")
_INDEX = attrgetter("index")
_PROC_KEY = attrgetter("pid", "start_time_ticks")
