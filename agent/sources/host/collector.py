"""Host CPU, load, memory and pressure stall information from the configured procfs root."""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from agent.core.fsread import read_text
from agent.core.openfiles import OpenFiles
from agent.sources.host.parse import parse_loadavg, parse_meminfo, parse_pressure, parse_stat
from agent.sources.host.part import HostPart, Pressure

log = structlog.get_logger("collector.host")


class HostCollector:
    name = "host"
    part = "host"

    def __init__(self, procfs: str) -> None:
        self.procfs = Path(procfs)
        # the paths as strings, made once: joining Paths each tick cost a tenth of the collect
        self._stat = str(self.procfs / "stat")
        self._loadavg = str(self.procfs / "loadavg")
        self._meminfo = str(self.procfs / "meminfo")
        self._pressure = [(r, str(self.procfs / "pressure" / r)) for r in ("cpu", "io", "memory")]
        # loadavg, meminfo and the PSI files are small: kept open and re-read with one pread each
        # (/proc/stat is not: a line per CPU outgrows a single read on a large node)
        self._files = OpenFiles(limit=8)
        self._told_no_psi = False

    def collect(self) -> HostPart:
        stat = parse_stat(read_text(self._stat))
        cpu, count = stat.value
        load = parse_loadavg(self._files.read(self._loadavg) or "")
        mem = parse_meminfo(self._files.read(self._meminfo) or "")
        pressure: dict[str, Pressure] = {}
        for resource, path in self._pressure:
            text = self._files.read(path)
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
        self._files.close()
