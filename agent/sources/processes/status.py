"""The processes source's keys of the status JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.core.projection import Each, Spec, fields
from agent.snapshot.summary import rounded
from agent.sources.processes.part import ProcessPart, ProcessStat
from agent.sources.processes.rates import ProcessRates

# the training processes' PIDs and names stay off the network
TCP_VIEW: dict[str, Spec] = {
    "training_processes": Each(fields("cpu_cores", "allowed_cores", "read_bytes_per_second", "descendants"))
}


PROC_IO = "/proc/<pid>/io"


def summary(part: ProcessPart, r: ProcessRates) -> dict[str, Any]:
    return {
        "training_processes": [
            {
                "pid": p.pid,
                "comm": p.comm,
                "cpu_cores": rounded(r.process_cpu_cores.get(p.pid)),
                "allowed_cores": p.allowed_cores,
                "read_bytes_per_second": rounded(r.process_read.get(p.pid), 1),
                "descendants": p.descendants,
                "read_counters": _read_counters(p),
            }
            for p in part.processes
        ]
    }


def _read_counters(p: ProcessStat) -> str:
    """Where the read series come from, and why they are absent where they are."""
    if p.io_problem is None:
        return PROC_IO
    if p.cgroup is not None:
        return f"cgroup {p.cgroup} only (block devices, the whole cgroup): {p.io_problem}"
    return f"none: {p.io_problem}"


def lines(summarized: Mapping[str, Any]) -> list[str]:
    """Text status: only where a training process's read series are missing, and why."""
    missing = [
        p for p in summarized.get("training_processes") or () if p.get("read_counters", PROC_IO) != PROC_IO
    ]
    if not missing:
        return []
    out = ["\n[training processes]"]
    out += [f"  pid {p['pid']} ({p['comm']}) read counters: {p['read_counters']}" for p in missing]
    return out
