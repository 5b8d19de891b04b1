"""/proc/stat, /proc/loadavg, /proc/meminfo and /proc/pressure/* parsers."""

from __future__ import annotations

import re
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


# The kernel's own layout of a PSI line: a file whose every line has it is read with one regex call,
# three times cheaper than line by line (the host collector reads three of them every tick).
_AVG = r"([0-9]+\.[0-9]+)"
_PSI_LINE = re.compile(rf"^(some|full) avg10={_AVG} avg60={_AVG} avg300={_AVG} total=([0-9]+)$", re.M)

MEMINFO_KEYS = ("MemTotal", "MemAvailable")


def parse_meminfo(text: str, keys: Sequence[str] = MEMINFO_KEYS) -> Parsed[dict[str, int]]:
    """The lines named ``keys``, in bytes (the kernel prints kB, meaning KiB; a line without a unit
    is a plain count). A key that is missing is left out; one whose line cannot be read is left out
    and counted. Only those lines are read: the file has ~55, the agent uses two, and reading every
    one cost a fifth of the host collector's tick."""
    out: dict[str, int] = {}
    bad = 0
    for key in keys:
        at = _line_of(text, key + ":")
        if at < 0:
            continue
        end = text.find("\n", at)
        parts = text[at + len(key) + 1 : end if end >= 0 else len(text)].split()
        try:
            n = int(parts[0])
        except (IndexError, ValueError):
            bad += 1
            continue
        out[key] = n * 1024 if len(parts) > 1 and parts[1] == "kB" else n
    return Parsed(out, bad)


def _line_of(text: str, head: str) -> int:
    """Where the last line starting with ``head`` starts, or -1 (the last, as a reader of every
    line keeps the last of a key written twice)."""
    at = text.rfind("\n" + head)
    if at >= 0:
        return at + 1
    return 0 if text.startswith(head) else -1


def parse_pressure(text: str) -> Pressure | None:
    """One /proc/pressure/<resource> file. ``total`` is in microseconds; returned in seconds."""
    found = _PSI_LINE.findall(text)
    if found and text.endswith("\n") and len(found) == text.count("\n"):  # every line in its layout
        # the last line of a kind, as line by line
        by_kind = {kind: tuple(map(float, vals)) for kind, *vals in found}
        return _pressure(by_kind.get("some"), by_kind.get("full"))
    return pressure_by_line(text)


PSI_KEYS = ("avg10", "avg60", "avg300", "total")


def pressure_by_line(text: str) -> Pressure | None:
    """:func:`parse_pressure` one line at a time: any text; lines it cannot read are left out."""
    lines: dict[str, tuple[float, ...]] = {}
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
            if vals.keys() >= set(PSI_KEYS):
                lines[fields[0]] = tuple(vals[k] for k in PSI_KEYS)
    return _pressure(lines.get("some"), lines.get("full"))


def _pressure(some: tuple[float, ...] | None, full: tuple[float, ...] | None) -> Pressure | None:
    """A resource's pressure from its ``some`` and ``full`` lines, each (avg10, avg60, avg300, total
    in microseconds); none without a ``some`` line."""
    if some is None:
        return None
    s10, s60, s300, s_total = some
    if full is None:
        return Pressure(s10, s60, s300, s_total / 1e6)
    f10, f60, f300, f_total = full
    return Pressure(s10, s60, s300, s_total / 1e6, f10, f60, f300, f_total / 1e6)
