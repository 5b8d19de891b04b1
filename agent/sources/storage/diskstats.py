"""/proc/diskstats: one line per block device.

The kernel has printed three shapes over the years: 14 fields (up to 4.17), 18 (4.18 added
discards) and 20 (5.5 added flushes). The first 14 mean the same in all of them, and they are all
this agent reads. Times are in milliseconds; sectors are always 512 bytes, whatever the device's
real sector size.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.sources.host.parse import Parsed, counters
from agent.sources.storage.part import DiskStat

MIN_FIELDS = 14


def parse_diskstats(text: str, skip: Callable[[str], object] | None = None) -> Parsed[list[DiskStat]]:
    """``skip(name)`` true leaves a device out before its numbers are parsed (partitions, loops)."""
    disks: list[DiskStat] = []
    bad = 0
    for line in text.splitlines():
        f = line.split()
        if not f:
            continue
        if len(f) < MIN_FIELDS:
            bad += 1
            continue
        if skip is not None and skip(f[2]):
            continue
        n = counters(f[3:MIN_FIELDS])
        if n is None:
            bad += 1
            continue
        disks.append(
            DiskStat(
                device=f[2],
                reads_completed=n[0],
                reads_merged=n[1],
                sectors_read=n[2],
                read_time_seconds=n[3] / 1000,
                writes_completed=n[4],
                sectors_written=n[6],
                write_time_seconds=n[7] / 1000,
                io_in_progress=n[8],
                io_time_seconds=n[9] / 1000,
            )
        )
    return Parsed(disks, bad)
