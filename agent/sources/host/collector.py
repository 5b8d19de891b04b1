"""Host CPU, load, memory and pressure stall information from the configured procfs root."""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from agent.core.fsread import read_optional, read_text
from agent.sources.host.parse import parse_loadavg, parse_meminfo, parse_pressure, parse_stat
from agent.sources.host.part import HostPart, Pressure

log = structlog.get_logger("collector.host")


class HostCollector:
    name = "host"
    part = "host"

    def __init__(self, procfs: str) -> None:
        self.procfs = Path(procfs)
        self._told_no_psi = False

    def collect(self) -> HostPart:
        stat = parse_stat(read_text(self.procfs / "stat"))
        cpu, count = stat.value
        load = parse_loadavg(read_optional(self.procfs / "loadavg") or "")
        mem = parse_meminfo(read_optional(self.procfs / "meminfo") or "")
        pressure: dict[str, Pressure] = {}
        for resource in ("cpu", "io", "memory"):
            text = read_optional(self.procfs / "pressure" / resource)
            if text is not None and (p := parse_pressure(text)) is not None:
                pressure[resource] = p
        if not pressure and not self._told_no_psi:
            self._told_no_psi = True
            log.warning(
                "cannot see pressure stall information",
                path=str(self.procfs / "pressure"),
                hint="kernel without CONFIG_PSI or booted with psi=0; iowait is used instead",
            )
        return HostPart(
            cpu=cpu,
            cpu_count=count or os.cpu_count() or 1,
            load1=load[0] if load else None,
            load5=load[1] if load else None,
            load15=load[2] if load else None,
            memory_total_bytes=mem.value.get("MemTotal"),
            memory_available_bytes=mem.value.get("MemAvailable"),
            pressure=pressure,
            malformed_lines=stat.malformed + mem.malformed,
        )

    def close(self) -> None:
        pass
