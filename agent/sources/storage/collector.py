"""Block devices from <procfs>/diskstats and NFS mounts from <procfs>/<pid>/mountstats.

FUSE filesystems (ossfs, s3fs, JuiceFS) and anything else without kernel counters have no line
here: their reads show up in the training processes' own ``rchar`` (see ``processes.py``).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from agent.core.fsread import read_optional, read_optional_stamped
from agent.sources import SourceAbsent
from agent.sources.storage.diskstats import parse_diskstats
from agent.sources.storage.mountstats import parse_mountstats
from agent.sources.storage.part import NfsMount, StoragePart


def visible_mounts(mounts: list[NfsMount]) -> tuple[NfsMount, ...]:
    """One mount per mountpoint: where mounts are stacked on one path, the last one listed is on
    top and the only one reads can reach; the ones below keep frozen counters."""
    top = {m.mountpoint: m for m in mounts}
    return tuple(m for m in mounts if top[m.mountpoint] is m)


class StorageCollector:
    name = "storage"
    part = "storage"

    def __init__(self, procfs: str, device_exclude: str, mountstats_pid: str = "self") -> None:
        self.diskstats = Path(procfs) / "diskstats"
        self.mountstats = Path(procfs) / mountstats_pid / "mountstats"
        # the same few dozen names every tick: remember each one's answer instead of matching again
        self.excluded = functools.lru_cache(maxsize=4096)(re.compile(device_exclude).search)
        self.malformed_total = 0

    def collect(self) -> StoragePart:
        disk_text, read_at = read_optional_stamped(self.diskstats)
        nfs_text = read_optional(self.mountstats)
        if disk_text is None and nfs_text is None:
            raise SourceAbsent(f"neither {self.diskstats} nor {self.mountstats} is readable")
        disks = parse_diskstats(disk_text or "", self.excluded)
        nfs = parse_mountstats(nfs_text or "")
        bad = disks.malformed + nfs.malformed
        self.malformed_total += bad
        return StoragePart(
            disks=tuple(disks.value),
            nfs=visible_mounts(nfs.value),
            malformed_lines=bad,
            malformed_lines_total=self.malformed_total,
            read_at=read_at,
        )

    def close(self) -> None:
        pass
