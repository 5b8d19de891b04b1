"""/proc/stat, /proc/loadavg, /proc/meminfo and /proc/pressure/* parsers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, NamedTuple, TypeVar

from agent.sources.host.part import CpuTimes, Pressure

USER_HZ = 100  # fixed at 100 by the kernel ABI for /proc/stat, whatever CONFIG_HZ is


T = TypeVar("T")


class Parsed(NamedTuple, Generic[T]):
    """What a parser read, and how many lines of its input it could not read.

    A named tuple rather than a frozen dataclass: collectors make one for every file they read
    every tick (two per process of each training tree), and a tuple costs half as much to make."""

    value: T
    malformed: int = 0


def counters(fields: Sequence[str]) -> list[int] | None:
    """A line's counter columns as ints; None when one is not a non-negative integer (a damaged line)."""
    try:
        n = list(map(int, fields))
    except ValueError:
        return None
    return n if n and min(n) >= 0 else None


def parse_stat(text: str) -> Parsed[tuple[CpuTimes | None, int]]:
    """Aggregate CPU times and the number of per-CPU lines."""
    cpu: CpuTimes | None = None
    count = 0
    bad = 0
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        # only the name of the per-CPU lines (one per CPU: 100s of them) is looked at
        name, _, rest = line.partition(" ")
        if name != "cpu":
            if name[3:].isdigit():
                count += 1
            else:
                bad += 1
            continue
        nums = counters(rest.split()[:8])
        if nums is None or len(nums) < 4:
            bad += 1
            continue
        nums += [0] * (8 - len(nums))
        cpu = CpuTimes(*(n / USER_HZ for n in nums))
    return Parsed((cpu, count), bad)


def parse_loadavg(text: str) -> tuple[float, float, float] | None:
    fields = text.split()
    try:
        return float(fields[0]), float(fields[1]), float(fields[2])
    except (IndexError, ValueError):
        return None


def parse_meminfo(text: str) -> Parsed[dict[str, int]]:
    """Values in bytes (the kernel prints kB, meaning KiB). Lines without a unit are plain counts."""
    out: dict[str, int] = {}
    bad = 0
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts:
            if line.strip():
                bad += 1
            continue
        try:
            n = int(parts[0])
        except ValueError:
            bad += 1
            continue
        out[key.strip()] = n * 1024 if len(parts) > 1 and parts[1] == "kB" else n
    return Parsed(out, bad)


def parse_pressure(text: str) -> Pressure | None:
    """One /proc/pressure/<resource> file. ``total`` is in microseconds; returned in seconds."""
    lines: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] not in ("some", "full"):
            continue
        vals: dict[str, float] = {}
        for f in fields[1:]:
            k, _, v = f.partition("=")
            try:
                vals[k] = float(v)
            except ValueError:
                break
        else:
            if {"avg10", "avg60", "avg300", "total"} <= vals.keys():
                lines[fields[0]] = vals
    some = lines.get("some")
    if some is None:
        return None
    full = lines.get("full")
    return Pressure(
        some_avg10=some["avg10"],
        some_avg60=some["avg60"],
        some_avg300=some["avg300"],
        some_total_seconds=some["total"] / 1e6,
        full_avg10=full["avg10"] if full else None,
        full_avg60=full["avg60"] if full else None,
        full_avg300=full["avg300"] if full else None,
        full_total_seconds=full["total"] / 1e6 if full else None,
    )
