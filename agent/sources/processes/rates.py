"""The processes source's per-second rates, per training process tree."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import ClassVar

from agent.snapshot.rates import pairs, rates
from agent.sources.processes.part import ProcessPart

_PROC_KEY = attrgetter("pid", "start_time_ticks")


@dataclass(frozen=True, slots=True)
class ProcessRates:
    source: ClassVar[str] = "processes"  # its source: snap.rates.of(ProcessRates) finds it by this

    process_cpu_cores: dict[int, float] = field(default_factory=dict)  # pid -> cores used (tree)
    process_read: dict[int, float] = field(default_factory=dict)  # pid -> bytes/s (rchar, tree)
    # pid -> bytes/s fetched from storage (read_bytes, tree): counts mmap'd datasets that rchar misses
    process_storage_read: dict[int, float] = field(default_factory=dict)
    process_write: dict[int, float] = field(default_factory=dict)  # pid -> bytes/s (wchar, tree)
    # pid -> bytes/s sent to storage (write_bytes, tree): a save, not a pipe to a worker or a socket
    process_storage_write: dict[int, float] = field(default_factory=dict)
    # pid -> cores each member of its tree ran or waited to run, per member present in both ticks
    process_member_busy: dict[int, tuple[float, ...]] = field(default_factory=dict)


def process_rates(prev: ProcessPart, cur: ProcessPart, dt: float) -> ProcessRates:
    # keyed by (pid, start time) so a reused pid never yields a rate against another process
    procs = pairs(prev.processes, cur.processes, _PROC_KEY)
    cpu = rates(procs, attrgetter("cpu_seconds"), dt)
    read = rates(procs, attrgetter("rchar"), dt)
    storage = rates(procs, attrgetter("read_bytes"), dt)
    write = rates(procs, attrgetter("wchar"), dt)
    storage_write = rates(procs, attrgetter("write_bytes"), dt)
    busy: dict[int, tuple[float, ...]] = {}
    if dt > 0:
        for (pid, _), a, b in procs:
            if not b.members:
                continue
            before = {(m[0], m[1]): m[2] for m in a.members}
            busy[pid] = tuple(
                (m[2] - x) / dt
                for m in b.members
                if (x := before.get((m[0], m[1]))) is not None and m[2] >= x
            )
    return ProcessRates(
        process_member_busy=busy,
        process_cpu_cores={pid: r for (pid, _), r in cpu.items()},
        process_read={pid: r for (pid, _), r in read.items()},
        process_storage_read={pid: r for (pid, _), r in storage.items()},
        process_write={pid: r for (pid, _), r in write.items()},
        process_storage_write={pid: r for (pid, _), r in storage_write.items()},
    )
