"""One compact classifier sample per snapshot.

The window holds these instead of whole snapshots: only the numbers the classifier reads, laid out
so that an evaluation over a 60-sample window of a large node stays under a millisecond.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from operator import attrgetter, is_
from typing import Any, NamedTuple

from agent.snapshot import NodeSnapshot
from agent.sources.gpu.part import ActivityWindow, GpuPart, kernel_share
from agent.sources.gpu.rates import GpuRates
from agent.sources.gpu.reasons import THROTTLING as THROTTLE_MASK
from agent.sources.host.part import HostPart
from agent.sources.host.rates import HostRates
from agent.sources.network.part import NetworkPart
from agent.sources.network.rates import NetworkRates
from agent.sources.processes.part import ProcessPart
from agent.sources.processes.rates import ProcessRates
from agent.sources.storage.rates import StorageRates
from agent.sources.trainer.rates import TrainerRates

_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {}
MAX_BUSY = 16  # the busiest processes kept per sample: enough to count the pegged workers


class Series(NamedTuple):
    """Per-device values of one sample, in key order. Equal key tuples are one shared object, so a
    window whose devices did not change is summed column-wise in C (see ``features.weighted``)."""

    keys: tuple[str, ...]
    values: tuple[float, ...]

    def items(self) -> Iterable[tuple[str, float]]:
        return zip(self.keys, self.values, strict=True)

    def get(self, key: str, default: float = 0.0) -> float:
        try:
            return self.values[self.keys.index(key)]
        except ValueError:
            return default


EMPTY = Series((), ())
_SERIES_KEYS = attrgetter("keys")


def columns(window: Sequence[Sample], attr: str) -> dict[str, tuple[float, ...]]:
    """Each series of one family across the window, one value per sample (0 where it was absent)."""
    fam: list[Series] = list(map(attrgetter(attr), window))
    keys = fam[0].keys if fam else ()
    if all(map(is_, map(_SERIES_KEYS, fam), repeat(keys))):
        return dict(zip(keys, zip(*(f.values for f in fam), strict=True), strict=False)) if keys else {}
    names = sorted({k for f in fam for k in f.keys})
    return {k: tuple(f.get(k) for f in fam) for k in names}


def series(values: dict[str, float]) -> Series:
    if not values:
        return EMPTY
    # a source lists its devices in the same order tick after tick: the sorted key tuple (shared
    # between samples) is looked up by that order, and where it is sorted already the values are
    # taken as they stand
    order = tuple(values)
    hit = _ORDER.get(order)
    if hit is None:
        if len(_KEYS) > 4096 or len(_ORDER) > 4096:  # devices come and go for months: bounded
            _KEYS.clear()
            _ORDER.clear()
        keys = tuple(sorted(values))
        shared = _KEYS.setdefault(keys, keys)
        hit = _ORDER[order] = (shared, order == shared)
    shared, in_order = hit
    return Series(shared, tuple(values.values()) if in_order else tuple(map(values.__getitem__, shared)))


_ORDER: dict[tuple[str, ...], tuple[tuple[str, ...], bool]] = {}


class GpuSample(NamedTuple):
    nvml_index: int  # the GPU's NVML index (a NamedTuple field cannot be called index)
    uuid: str
    up: bool
    util: float | None  # share of the sample a kernel ran, over the work measure's span (kernel_share)
    power: float | None  # watts
    limit: float | None  # enforced power limit, watts
    sm: float | None  # GPM SM (or tensor) activity ratio; None where unsupported
    throttle: int = 0  # clocks event reasons & THROTTLE_MASK
    xids: int = 0  # cumulative Xid errors
    clock: float | None = None  # SM clock, Hz
    clock_max: float | None = None  # the highest SM clock it supports, Hz
    # GPM over the windows inside the sample, where it was read in more than one: its shares are
    # split window by window (gpus.shares); util and sm above are their time-weighted means
    windows: tuple[ActivityWindow, ...] = ()


# a tree writing this fast (bytes/s) while blocked is in its own writes (a checkpoint's fsync), not
# waiting for its input
WRITING = 1e6


class Trainers(NamedTuple):
    """The training processes (and their workers) seen in one snapshot."""

    keys: frozenset[tuple[int, int]]  # (pid, start time); start 0 when only NVML saw the pid
    cores: float | None  # CPU cores used by the trees in the last interval
    allowed: float | None  # cores they may use (cpuset / quota), capped at the host's CPUs
    saturation: float | None  # cores over allowed, the tighter of per-process and all together
    label: str  # "pid 4242 (python) +3 workers"
    read: float | None = None  # bytes/s the trees read (the larger of read() bytes and storage reads)
    # each process of the trees: cores it ran or waited to run (schedstat), busiest first; a
    # data-loader worker that is CPU-bound reads ~1.0 here even when other load takes its core
    busy: tuple[float, ...] = ()
    workers: int = 0  # descendants of the training processes (data-loader workers), all trees
    ranks: int = 0  # training processes (trees)
    idle_cores: float | None = None  # of the allowed cores, how many nothing ran on
    # bytes/s read() returned that no block device or NFS fetched (rchar - read_bytes): FUSE mounts
    # (ossfs, s3fs, JuiceFS), read() on sockets, the page cache. recv() on a socket is not counted
    # by the kernel at all, so input streamed by an HTTP client does not show here
    nonblock_read: float | None = None
    # 1.0 where a training process or worker was in uninterruptible sleep (waiting on a read, mostly)
    # at this sample, else 0.0: over a window, the share of time one was blocked
    blocked: float | None = None
    # bytes/s the trees sent to storage (write_bytes: files, block devices; not the pipes to a pool's
    # workers nor sockets, which wchar counts too): a save
    write: float | None = None
    # the job's rank count as its launcher set it (the largest of the trees'), 1 where none is set;
    # None where no environment could be read. Several trees on the node are several ranks too
    world_size: int | None = None


class Sample(NamedTuple):
    t: float  # monotonic seconds
    wall: float
    gpus: tuple[GpuSample, ...]
    trainers: Trainers | None  # None: neither NVML nor the process collector can tell
    disk_read: Series  # device -> bytes/s
    disk_busy: Series  # device -> io_time share
    nfs_read: Series  # mountpoint -> bytes/s from the server
    nfs_ops: Series  # mountpoint -> READs/s
    nfs_rtt_time: Series  # mountpoint -> READ RTT seconds per second (mean RTT x READs/s)
    iowait: float | None
    psi_io: float | None  # share of the interval some task stalled on I/O
    nic: Series  # interface -> max(rx, tx) bytes/s
    nic_speed: dict[str, float]  # interface -> link capacity bytes/s where known
    rdma: Series  # "dev/port" -> max(rx, tx) bytes/s
    rdma_rate: dict[str, float]  # "dev/port" -> link rate bytes/s
    rdma_cnp: Series  # "dev/port" -> CNPs/s
    rdma_xmit_wait: Series  # "dev/port" -> port_xmit_wait ticks/s
    # bytes/s the GPUs received over PCIe, mean per GPU that reports it (host-to-device copies); None
    # where none does
    pcie_rx: float | None = None
    # what tna_client in the training process said of this interval (its saves, evaluations, input
    # waits); None where no trainer tells its spans
    told: TrainerRates | None = None

    def nfs_rtt(self) -> dict[str, float]:
        """Mean READ RTT per mount over this interval, for mounts that did READs."""
        return {
            k: t / ops
            for (k, t), ops in zip(self.nfs_rtt_time.items(), self.nfs_ops.values, strict=True)
            if ops > 0
        }


def _max_rx_tx(rx: dict, tx: dict, name: Callable[[Any], str] | None = None) -> Series:
    if rx.keys() == tx.keys():  # the usual case: both directions of the same devices
        both = {k: (t if t > r else r) for (k, r), t in zip(rx.items(), map(tx.__getitem__, rx), strict=True)}
    else:
        both = {k: max(rx.get(k, 0.0), tx.get(k, 0.0)) for k in rx.keys() | tx.keys()}
    return series(both if name is None else {name(k): v for k, v in both.items()})


_PORT_NAMES: dict[tuple[str, int], str] = {}


def port_name(key: tuple[str, int]) -> str:
    name = _PORT_NAMES.get(key)
    if name is None:
        if len(_PORT_NAMES) > 4096:
            _PORT_NAMES.clear()
        name = _PORT_NAMES[key] = f"{key[0]}/{key[1]}"
    return name


def _trainers(snap: NodeSnapshot) -> Trainers | None:
    gpu, processes, host = snap.part(GpuPart), snap.part(ProcessPart), snap.part(HostPart)
    gpu_pids: dict[int, None] = {}
    if gpu is not None:
        for g in gpu.gpus:
            for gp in g.processes:
                gpu_pids[gp.pid] = None
    procs = processes.processes if processes is not None else ()
    if gpu is None and processes is None:
        return None
    keys = {(p.pid, p.start_time_ticks) for p in procs}
    seen = {p.pid for p in procs}
    keys.update((pid, 0) for pid in gpu_pids if pid not in seen)
    pr = snap.rates.of(ProcessRates)
    cores_used = pr.process_cpu_cores
    read_rates = [
        max(pr.process_read.get(p.pid, 0.0), pr.process_storage_read.get(p.pid, 0.0))
        for p in procs
        if p.pid in pr.process_read or p.pid in pr.process_storage_read
    ]
    nonblock = [
        max(0.0, pr.process_read[p.pid] - pr.process_storage_read.get(p.pid, 0.0))
        for p in procs
        if p.pid in pr.process_read
    ]
    total_cores = total_allowed = 0.0
    per_process = 0.0
    measured = False
    for p in procs:
        c = cores_used.get(p.pid)
        if c is None:
            continue
        measured = True
        total_cores += c
        total_allowed += p.allowed_cores
        if p.allowed_cores > 0:
            per_process = max(per_process, c / p.allowed_cores)
    if measured and host is not None and host.cpu_count:
        total_allowed = min(total_allowed, float(host.cpu_count))
    saturation = None
    if measured and total_allowed > 0:
        # several ranks sharing one cpuset each see the whole set: the sum over the host catches that
        saturation = max(per_process, total_cores / total_allowed)
    member_busy = pr.process_member_busy
    busy = sorted((b for p in procs for b in member_busy.get(p.pid, ())), reverse=True)[:MAX_BUSY]
    idle_cores = None
    cpu_busy = snap.rates.of(HostRates).cpu_busy_ratio
    if measured and host is not None and host.cpu_count and cpu_busy is not None:
        # the host's idle cores, as far as they are ones the trainers may use
        host_idle = host.cpu_count * (1.0 - cpu_busy)
        idle_cores = max(0.0, min(host_idle, total_allowed - total_cores))
    writes = [pr.process_storage_write[p.pid] for p in procs if p.pid in pr.process_storage_write]
    sizes = [p.world_size for p in procs if p.world_size is not None]
    return Trainers(
        keys=frozenset(keys),
        cores=total_cores if measured else None,
        allowed=total_allowed if measured else None,
        saturation=saturation,
        label=_label(procs, gpu_pids),
        read=sum(read_rates) if read_rates else None,
        busy=tuple(busy),
        workers=sum(p.descendants for p in procs),
        ranks=len(procs),
        idle_cores=idle_cores,
        nonblock_read=sum(nonblock) if nonblock else None,
        blocked=(1.0 if any(p.blocked and pr.process_write.get(p.pid, 0.0) < WRITING for p in procs) else 0.0)
        if procs
        else None,
        write=sum(writes) if writes else None,
        world_size=max(sizes) if sizes else None,
    )


def _label(procs, gpu_pids: dict[int, None]) -> str:
    if procs:
        first = procs[0]
        workers = sum(p.descendants for p in procs)
        text = f"pid {first.pid} ({first.comm})"
        if len(procs) > 1:
            text += f" and {len(procs) - 1} more"
        return text + (f" +{workers} workers" if workers else "")
    if gpu_pids:
        pids = list(gpu_pids)
        return f"pid {pids[0]}" + (f" and {len(pids) - 1} more" if len(pids) > 1 else "")
    return "none"


def sample_from_snapshot(snap: NodeSnapshot) -> Sample:
    rates = snap.rates
    st, host, net = rates.of(StorageRates), rates.of(HostRates), rates.of(NetworkRates)
    gpu, network = snap.part(GpuPart), snap.part(NetworkPart)
    gpus: tuple[GpuSample, ...] = ()
    if gpu is not None:
        gpus = tuple(
            GpuSample(  # positional: a keyword call costs half as much again, 8 GPUs a tick
                g.index,
                g.uuid,
                g.up,
                kernel_share(g),
                g.power_watts,
                g.power_limit_watts,
                g.sm_active if g.sm_active is not None else g.tensor_active,
                (g.clocks_event_reasons or 0) & THROTTLE_MASK,
                sum(g.xid_counts.values()),
                g.sm_clock_hertz,
                g.sm_clock_max_hertz,
                g.activity_windows,
            )
            for g in gpu.gpus
        )
    nic_speed: dict[str, float] = {}
    rdma_rate: dict[str, float] = {}
    if network is not None:
        # a shaper on the NIC here is its ceiling: the reported speed is only an upper bound
        for n in network.nics:
            known = [v for v in (n.speed_bytes, n.shaped_bytes) if v]
            if known:
                nic_speed[n.device] = float(min(known))
        rdma_rate = {port_name((p.device, p.port)): float(p.rate_bytes) for p in network.rdma if p.rate_bytes}
    ops = st.nfs_read_ops
    pcie = rates.of(GpuRates).gpu_pcie_rx
    return Sample(
        t=snap.monotonic,
        wall=snap.timestamp,
        gpus=gpus,
        trainers=_trainers(snap),
        disk_read=series(st.disk_read),
        disk_busy=series(st.disk_busy_ratio),
        nfs_read=series(st.nfs_read),
        nfs_ops=series({k: ops.get(k, 0.0) for k in st.nfs_read}),
        nfs_rtt_time=series({k: st.nfs_read_rtt_seconds.get(k, 0.0) * ops.get(k, 0.0) for k in st.nfs_read}),
        iowait=host.cpu_iowait_ratio,
        psi_io=host.pressure_some_ratio.get("io"),
        nic=_max_rx_tx(net.nic_rx, net.nic_tx),
        nic_speed=nic_speed,
        rdma=_max_rx_tx(net.rdma_rx, net.rdma_tx, port_name),
        rdma_rate=rdma_rate,
        rdma_cnp=series({port_name(k): v for k, v in net.rdma_cnp.items()}),
        rdma_xmit_wait=series({port_name(k): v for k, v in net.rdma_xmit_wait.items()}),
        pcie_rx=sum(pcie.values()) / len(pcie) if pcie else None,
        told=told if (told := rates.of(TrainerRates)).reporting else None,
    )
