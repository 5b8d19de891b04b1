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


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values``, interpolated between the two nearest ranks."""
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)
