"""psutil against the agent's own /proc parsers, for each thing the collectors read every tick.

Both sides read the same live files in the same run; CPU time per call (``time.process_time``),
the median of 7 rounds. psutil is the peer: where it is cheaper *and* could do the job (a procfs root
per collector, malformed-line counts, PSI), the agent should use it.

    .venv/bin/python bench/psutil_vs_parsers.py
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from agent.core.fsread import read_text
from agent.sources.host.parse import parse_loadavg, parse_meminfo, parse_pressure, parse_stat
from agent.sources.network.netdev import parse_net_dev
from agent.sources.processes.procpid import parse_pid_io, parse_pid_stat
from agent.sources.storage.diskstats import parse_diskstats

PROC = Path("/proc")
PID = os.getpid()


def per_call(fn: Callable[[], object], n: int = 1000, rounds: int = 7) -> float:
    fn()
    samples = []
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        samples.append((time.process_time() - t0) / n)
    return statistics.median(samples) * 1e6


def ours_host() -> None:
    parse_stat(read_text(PROC / "stat"))
    parse_loadavg(read_text(PROC / "loadavg"))
    parse_meminfo(read_text(PROC / "meminfo"))


def psutil_host() -> None:
    psutil.cpu_times()
    psutil.cpu_count()
    psutil.getloadavg()
    psutil.virtual_memory()


def ours_psi() -> None:
    for r in ("cpu", "io", "memory"):
        parse_pressure(read_text(PROC / "pressure" / r))


def ours_process() -> None:
    parse_pid_stat(read_text(PROC / str(PID) / "stat"))
    parse_pid_io(read_text(PROC / str(PID) / "io"))


def psutil_process() -> None:
    p = psutil.Process(PID)
    with p.oneshot():
        p.cpu_times()
        p.io_counters()
        p.num_threads()
        p.create_time()


CASES = [
    ("host: stat, loadavg, meminfo", ours_host, psutil_host),
    (
        "disks: diskstats",
        lambda: parse_diskstats(read_text(PROC / "diskstats")),
        lambda: psutil.disk_io_counters(True),
    ),
    (
        "NICs: net/dev",
        lambda: parse_net_dev(read_text(PROC / "net" / "dev")),
        lambda: psutil.net_io_counters(True),
    ),
    ("one process: stat, io", ours_process, psutil_process),
    ("PSI: pressure/cpu, io, memory", ours_psi, None),
]


def main() -> None:
    print(f"psutil {psutil.__version__}, {os.cpu_count()} CPUs; CPU µs per call, median of 7 rounds")
    print("| read | agent parser | psutil | psutil / ours |")
    print("| --- | --- | --- | --- |")
    for name, ours, peer in CASES:
        a = per_call(ours)
        if peer is None:
            print(f"| {name} | {a:.1f} | (not in psutil) | - |")
            continue
        b = per_call(peer)
        print(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.2f} |")


if __name__ == "__main__":
    main()
