"""What the benchmark scripts share: a free loopback port, a process's CPU time, percentiles.

Imported by the scripts in this folder as ``benchlib`` (``python bench/<script>.py`` puts the folder on
``sys.path``)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def thread_cpu_seconds(pid: int) -> float:
    """CPU time of ``pid``'s live threads at nanosecond resolution (``/proc/<pid>/stat`` counts in
    10 ms ticks, too coarse for a few milliseconds a second); for a process whose threads live as
    long as it does (the agent's do)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values``, interpolated between the two nearest ranks."""
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)
