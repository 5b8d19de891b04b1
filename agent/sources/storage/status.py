"""The storage source's keys of the status JSON, and its lines in ``training-node-agent status``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.core.projection import Each, Spec, fields
from agent.snapshot.summary import rounded, throughput_lines
from agent.sources.storage.part import StoragePart
from agent.sources.storage.rates import StorageRates

# NFS exports stay off the network
TCP_VIEW: dict[str, Spec] = {
    "disks": Each(fields("read_bytes_per_second", "busy_ratio")),
    "nfs": Each(fields("read_bytes_per_second", "read_ops_per_second", "read_rtt_seconds")),
}


def summary(part: StoragePart, r: StorageRates) -> dict[str, Any]:
    return {
        "disks": {
            d.device: {
                "read_bytes_per_second": rounded(r.disk_read.get(d.device), 1),
                "busy_ratio": rounded(r.disk_busy_ratio.get(d.device)),
            }
            for d in part.disks
        },
        "nfs": {
            m.mountpoint: {
                "export": m.export,
                "read_bytes_per_second": rounded(r.nfs_read.get(m.mountpoint), 1),
                "read_ops_per_second": rounded(r.nfs_read_ops.get(m.mountpoint), 2),
                "read_rtt_seconds": rounded(r.nfs_read_rtt_seconds.get(m.mountpoint), 6),
            }
            for m in part.nfs
        },
    }


def lines(summarized: Mapping[str, Any]) -> list[str]:
    return throughput_lines(summarized, "disks") + throughput_lines(summarized, "nfs")
