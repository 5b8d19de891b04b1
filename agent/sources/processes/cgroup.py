"""/proc/<pid>/cgroup, the CPU quota files of cgroup v2 (``cpu.max``) and v1 (``cpu.cfs_*``), and the
read counters of v2 (``io.stat``) and v1 (``blkio.throttle.io_service_bytes``)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.sources.host.parse import Parsed


@dataclass(frozen=True, slots=True)
class CgroupEntry:
    hierarchy: int  # 0 is the v2 unified hierarchy
    controllers: tuple[str, ...]  # empty for v2
    path: str


def parse_proc_cgroup(text: str) -> Parsed[list[CgroupEntry]]:
    out: list[CgroupEntry] = []
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            bad += 1
            continue
        try:
            hid = int(parts[0])
        except ValueError:
            bad += 1
            continue
        ctrls = tuple(c for c in parts[1].split(",") if c)
        out.append(CgroupEntry(hid, ctrls, parts[2]))
    return Parsed(out, bad)


def parse_cpu_max(text: str) -> Parsed[float | None]:
    """cgroup v2 ``cpu.max``: ``"200000 100000"`` -> 2.0 cores; ``"max 100000"`` -> None (no limit)."""
    f = text.split()
    if len(f) == 2 and f[0] == "max":
        return Parsed(None, 0)
    try:
        quota, period = int(f[0]), int(f[1])
    except (ValueError, IndexError):
        return Parsed(None, 1)
    if quota <= 0 or period <= 0:
        return Parsed(None, 1)
    return Parsed(quota / period, 0)


def parse_cfs_quota(quota_text: str, period_text: str) -> Parsed[float | None]:
    """cgroup v1 ``cpu.cfs_quota_us`` (-1: no limit) over ``cpu.cfs_period_us``."""
    try:
        quota, period = int(quota_text.strip()), int(period_text.strip())
    except ValueError:
        return Parsed(None, 1)
    if quota < 0:
        return Parsed(None, 0)
    if quota == 0 or period <= 0:
        return Parsed(None, 1)
    return Parsed(quota / period, 0)


def parse_io_stat(text: str) -> Parsed[int | None]:
    """cgroup v2 ``io.stat``: one line per device, ``8:0 rbytes=1459200 wbytes=314773504 rios=192 ...``
    -> the bytes read from every block device together; None when it lists no device."""
    total: int | None = None
    bad = 0
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if ":" not in fields[0]:
            bad += 1
            continue
        keys = dict(f.partition("=")[::2] for f in fields[1:])
        value = keys.get("rbytes")
        if value is None or not value.isdigit():
            bad += 1
            continue
        total = (total or 0) + int(value)
    return Parsed(total, bad)


def parse_blkio_bytes(text: str) -> Parsed[int | None]:
    """cgroup v1 ``blkio.throttle.io_service_bytes[_recursive]``: ``8:0 Read 3387547648`` (also Write,
    Sync, Async, Discard, Total per device) and a last ``Total N`` -> the Read bytes of every device
    together; None when it lists no device."""
    total: int | None = None
    bad = 0
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] == "Total":
            continue
        if len(fields) != 3 or ":" not in fields[0] or not fields[2].isdigit():
            bad += 1
            continue
        if fields[1] == "Read":
            total = (total or 0) + int(fields[2])
    return Parsed(total, bad)
