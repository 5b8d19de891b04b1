"""The storage source's per-second rates: disk and NFS reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import ClassVar

from agent.snapshot.rates import DEVICE, pairs, rates
from agent.sources.storage.part import StoragePart

_MOUNTPOINT = attrgetter("mountpoint")


@dataclass(frozen=True, slots=True)
class StorageRates:
    source: ClassVar[str] = "storage"  # its source: snap.rates.of(StorageRates) finds it by this

    disk_read: dict[str, float] = field(default_factory=dict)  # device -> bytes/s
    disk_busy_ratio: dict[str, float] = field(default_factory=dict)  # device, io_time share
    nfs_read: dict[str, float] = field(default_factory=dict)  # mountpoint, bytes/s from the server
    nfs_read_ops: dict[str, float] = field(default_factory=dict)  # mountpoint, READ ops/s
    nfs_read_rtt_seconds: dict[str, float] = field(default_factory=dict)  # mountpoint, mean RTT per READ


def storage_rates(prev: StoragePart, cur: StoragePart, dt: float) -> StorageRates:
    disks = pairs(prev.disks, cur.disks, DEVICE)
    mounts = pairs(prev.nfs, cur.nfs, _MOUNTPOINT)
    busy = rates(disks, attrgetter("io_time_seconds"), dt)
    ops = rates(mounts, attrgetter("read_ops"), dt)
    rtt = rates(mounts, attrgetter("read_rtt_seconds"), dt)
    return StorageRates(
        disk_read=rates(disks, attrgetter("read_bytes"), dt),
        disk_busy_ratio={k: min(1.0, v) for k, v in busy.items()},
        nfs_read=rates(mounts, attrgetter("server_read_bytes"), dt),
        nfs_read_ops=ops,
        nfs_read_rtt_seconds={k: rtt[k] / ops[k] for k in rtt if ops.get(k)},
    )
