"""The storage source's snapshot part: block devices (/proc/diskstats) and NFS mounts (mountstats).

Counters are cumulative raw values as the kernel or driver reports them, converted to base units
(bytes, seconds); ``None`` always means "not available on this node", never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class DiskStat:
    device: str
    reads_completed: int
    reads_merged: int
    sectors_read: int
    read_time_seconds: float
    writes_completed: int
    sectors_written: int
    write_time_seconds: float
    io_in_progress: int
    io_time_seconds: float

    @property
    def read_bytes(self) -> int:
        return self.sectors_read * 512

    @property
    def written_bytes(self) -> int:
        return self.sectors_written * 512


@dataclass(frozen=True, slots=True)
class NfsMount:
    mountpoint: str
    export: str  # "server:/path"
    protocol: str  # "tcp" / "udp" / "rdma"
    fstype: str  # "nfs" / "nfs4"
    read_bytes: int  # bytes: 1st field, reads served to applications (page cache included)
    server_read_bytes: int  # bytes: 5th field, bytes read from the server
    read_ops: int  # per-op READ: operations
    read_rtt_seconds: float  # per-op READ: cumulative RTT
    read_exe_seconds: float  # per-op READ: cumulative execute time


@dataclass(frozen=True, slots=True)
class StoragePart:
    source: ClassVar[str] = "storage"  # its source: snap.part(StoragePart) finds it by this

    disks: tuple[DiskStat, ...]
    nfs: tuple[NfsMount, ...]
    malformed_lines: int = 0  # in this read
    malformed_lines_total: int = 0  # since the agent started
    read_at: float | None = field(default=None, compare=False)  # monotonic time its counters were read
