"""/proc/<pid>/cgroup and the CPU quota files of cgroup v2 (``cpu.max``) and v1 (``cpu.cfs_*``)."""

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
