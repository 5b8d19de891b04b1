"""training_node_disk_* and training_node_nfs_* families: raw kernel counters in base units."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.snapshot import NodeSnapshot
from agent.sources.storage.part import StoragePart

_DISK_COUNTERS = (
    ("read_bytes", "read_bytes", "Bytes read from the block device (sectors read × 512)."),
    ("reads_completed", "reads_completed", "Reads completed by the block device."),
    ("read_time_seconds", "read_time_seconds", "Time spent by all reads, summed over requests."),
    ("written_bytes", "written_bytes", "Bytes written to the block device (sectors written × 512)."),
    ("write_time_seconds", "write_time_seconds", "Time spent by all writes, summed over requests."),
    ("io_time_seconds", "io_time_seconds", "Time the device had I/O in flight (busy time)."),
)
_NFS_COUNTERS = (
    ("read_bytes", "server_read_bytes", "Bytes the NFS client read from the server (mountstats bytes: 5th)."),
    (
        "application_read_bytes",
        "read_bytes",
        "Bytes read() returned from this mount, page cache included (mountstats bytes: 1st).",
    ),
    ("read_operations", "read_ops", "NFS READ operations sent to the server."),
    ("read_rtt_seconds", "read_rtt_seconds", "Cumulative round-trip time of NFS READ operations."),
    (
        "read_execute_seconds",
        "read_exe_seconds",
        "Cumulative time from queueing to completion of NFS READ operations.",
    ),
)


def render(snap: NodeSnapshot) -> Iterable[Metric]:
    part = snap.part(StoragePart)
    if part is None:
        return
    for suffix, attr, doc in _DISK_COUNTERS:
        fam = CounterMetricFamily(f"training_node_disk_{suffix}", doc, labels=["device"])
        for d in part.disks:
            fam.add_metric([d.device], getattr(d, attr))
        yield fam
    g = GaugeMetricFamily(
        "training_node_disk_io_now", "I/Os in flight on the block device.", labels=["device"]
    )
    for d in part.disks:
        g.add_metric([d.device], d.io_in_progress)
    yield g
    labels = ["mountpoint", "export"]
    for suffix, attr, doc in _NFS_COUNTERS:
        fam = CounterMetricFamily(f"training_node_nfs_{suffix}", doc, labels=labels)
        for m in part.nfs:
            fam.add_metric([m.mountpoint, m.export], getattr(m, attr))
        yield fam
    info = GaugeMetricFamily(
        "training_node_nfs_mount_info",
        "One series per NFS mount: filesystem type and RPC transport.",
        labels=[*labels, "fstype", "protocol"],
    )
    for m in part.nfs:
        info.add_metric([m.mountpoint, m.export, m.fstype, m.protocol], 1)
    yield info
