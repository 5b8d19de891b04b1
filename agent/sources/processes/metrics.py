"""training_node_process_* families: the followed training processes, each with its descendants."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.snapshot import NodeSnapshot
from agent.sources.processes.part import ProcessPart

LABELS = ["pid", "comm"]


def render(snap: NodeSnapshot) -> Iterable[Metric]:
    part = snap.part(ProcessPart)
    if part is None:
        return
    cpu = CounterMetricFamily(
        "training_node_process_cpu_seconds",
        "CPU time of the training process and its descendants (reaped ones included).",
        labels=LABELS,
    )
    rchar = CounterMetricFamily(
        "training_node_process_read_bytes",
        "Bytes read() returned to the process tree (rchar): page cache, FUSE mounts (ossfs), NFS, disks.",
        labels=LABELS,
    )
    storage = CounterMetricFamily(
        "training_node_process_storage_read_bytes",
        "Bytes the process tree caused to be fetched from block devices or NFS (read_bytes).",
        labels=LABELS,
    )
    cgroup = CounterMetricFamily(
        "training_node_process_cgroup_read_bytes",
        "Where /proc/<pid>/io is unreadable (another user's trainer): bytes read from block devices by "
        "every process in the trainer's cgroup (io.stat rbytes, v1 blkio Read); NFS is not in it.",
        labels=[*LABELS, "cgroup"],
    )
    cores = GaugeMetricFamily(
        "training_node_process_allowed_cores",
        "CPUs the training process may use: min(affinity list, cgroup CPU quota).",
        labels=LABELS,
    )
    desc = GaugeMetricFamily(
        "training_node_process_descendants", "Live descendants (data-loader workers).", labels=LABELS
    )
    threads = GaugeMetricFamily(
        "training_node_process_threads", "Threads of the process and its descendants.", labels=LABELS
    )
    for p in part.processes:
        lv = [str(p.pid), p.comm]
        cpu.add_metric(lv, p.cpu_seconds)
        if p.rchar is not None:
            rchar.add_metric(lv, p.rchar)
        if p.read_bytes is not None:
            storage.add_metric(lv, p.read_bytes)
        if p.cgroup_read_bytes is not None and p.cgroup is not None:
            cgroup.add_metric([*lv, p.cgroup], p.cgroup_read_bytes)
        cores.add_metric(lv, p.allowed_cores)
        desc.add_metric(lv, p.descendants)
        threads.add_metric(lv, p.threads)
    yield from (cpu, rchar, storage, cgroup, cores, desc, threads)
