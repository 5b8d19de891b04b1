"""NICs from <procfs>/net/dev and <sysfs>/class/net, RDMA ports from <sysfs>/class/infiniband.

Link capacity is ``class/net/<if>/speed``; where the kernel does not know it (-1 on virtio and
most cloud NICs) the ``[network] capacity`` table gives it. A shaper on the NIC itself (a root
tbf, ``qdisc.py``) is read every few seconds and known by the interface's ``ifindex``. Which counter
files each RDMA port has is looked up once and again every minute or whenever the set of devices
changes, so a tick reads only files that exist, through descriptors kept open (``openfiles.py``).
"""

from __future__ import annotations

import functools
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

import structlog

from agent.core.fsread import read_optional_stamped
from agent.core.openfiles import OpenFiles
from agent.sources import SourceAbsent
from agent.sources.network.infiniband import WANTED, build_port
from agent.sources.network.netclass import parse_speed
from agent.sources.network.netdev import parse_net_dev
from agent.sources.network.part import NetworkPart, NicStat, RdmaPort
from agent.sources.network.qdisc import dump_qdiscs, parse_qdiscs

LAYOUT_REFRESH_SECONDS = 60.0
SHAPERS_REFRESH_SECONDS = 5.0  # a shaper set mid-job is seen within this
_COUNTER_DIRS = ("counters", "counters_ext", "hw_counters")

log = structlog.get_logger("collector.network")


@dataclass(frozen=True, slots=True)
class _PortFiles:
    device: str
    port: int
    files: dict[str, str]  # "counters/port_rcv_data" -> absolute path, only those in WANTED
    rate: str


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _wanted_in(folder: Path, sub: str) -> dict[str, str]:
    return {f"{sub}/{n}": str(folder / n) for n in _listdir(folder) if f"{sub}/{n}" in WANTED}


def rdma_layout(ib_root: Path, device: str) -> list[_PortFiles]:
    """The counter files one RDMA device's ports have. A device without ``ports/N/counters``
    (eRDMA) just has fewer files; one without ``ports`` has no ports."""
    dev_dir = ib_root / device
    # some eRDMA drivers keep hw_counters per device; they belong to its only port
    device_hw = _wanted_in(dev_dir / "hw_counters", "hw_counters")
    ports = sorted(int(p) for p in _listdir(dev_dir / "ports") if p.isdigit())
    out = []
    for port in ports:
        pdir = dev_dir / "ports" / str(port)
        files: dict[str, str] = {}
        if len(ports) == 1:
            files.update(device_hw)
        for sub in _COUNTER_DIRS:
            files.update(_wanted_in(pdir / sub, sub))
        out.append(_PortFiles(device, port, files, str(pdir / "rate")))
    return out


class NetworkCollector:
    name = "network"
    part = "network"

    def __init__(
        self,
        procfs: str,
        sysfs: str,
        device_exclude: str,
        capacity: dict[str, float] | None = None,
        rdma: bool = True,
    ) -> None:
        self.net_dev = Path(procfs) / "net" / "dev"
        self.class_net = Path(sysfs) / "class" / "net"
        self.ib_root = Path(sysfs) / "class" / "infiniband"
        # the same names every tick: remember each one's answer instead of matching again
        self.excluded = functools.lru_cache(maxsize=4096)(re.compile(device_exclude).search)
        self.capacity = {k: int(v) for k, v in (capacity or {}).items()}
        self.rdma_enabled = rdma
        self.malformed_total = 0
        self._layout: list[_PortFiles] = []
        self._layout_devices: list[str] | None = None
        self._layout_at = 0.0
        self._files = OpenFiles()  # speed files and RDMA counters, kept open between ticks
        self._swept_at = time.monotonic()
        self._shapers: dict[int, int] = {}  # ifindex -> bytes/s
        self._shapers_at = float("-inf")
        self._shapers_failed = False
        self._indexes: dict[str, int | None] = {}  # name -> ifindex, read again with the shapers

    def _shaper_rates(self, now: float) -> dict[int, int]:
        if now - self._shapers_at < (
            LAYOUT_REFRESH_SECONDS if self._shapers_failed else SHAPERS_REFRESH_SECONDS
        ):
            return self._shapers
        self._shapers_at = now
        self._indexes = {}  # a name can come back as another interface
        try:
            parsed = parse_qdiscs(dump_qdiscs())
        except OSError as e:
            if not self._shapers_failed:
                log.warning("cannot read the NICs' traffic shapers (rtnetlink)", error=str(e))
            self._shapers_failed = True
            self._shapers = {}
            return self._shapers
        self._shapers_failed = False
        self.malformed_total += parsed.malformed
        self._shapers = parsed.value
        return self._shapers

    def collect(self) -> NetworkPart:
        now = time.monotonic()
        if now - self._swept_at > LAYOUT_REFRESH_SECONDS:
            self._files.sweep()  # interfaces and ports that went
            self._swept_at = now
        bad = 0
        text, read_at = read_optional_stamped(self.net_dev)
        # the RDMA counters next, so that one stamp fits both; the speed files can wait
        rdma: list[RdmaPort] = []
        if self.rdma_enabled:
            for pf in self._ports():
                files = {k: t for k, path in pf.files.items() if (t := self._files.read(path)) is not None}
                port = build_port(pf.device, pf.port, files, self._files.read(pf.rate))
                rdma.append(port.value)
                bad += port.malformed
        parsed = parse_net_dev(text or "", self.excluded)
        bad += parsed.malformed
        nics = {n.device: n for n in parsed.value}
        sys_names = _listdir(self.class_net)
        for name in sys_names:
            # only sysfs knows it (a fixture tree, another network namespace): speed, no counters
            if name not in nics and not self.excluded(name) and (self.class_net / name).is_dir():
                nics[name] = NicStat(name, None, None, None, None, None, None, None, None, None)
        out: list[NicStat] = []
        shapers = self._shaper_rates(now)
        for name in sorted(nics):
            speed = None
            speed_text = self._files.read(f"{self.class_net}/{name}/speed")
            if speed_text is not None:
                p = parse_speed(speed_text)
                speed, bad = p.value, bad + p.malformed
            if speed is None:
                speed = self.capacity.get(name)
            shaped = None
            if shapers and (index := self._index(name)) is not None:
                shaped = shapers.get(index)
            out.append(replace(nics[name], speed_bytes=speed, shaped_bytes=shaped))
        if text is None and not sys_names and not rdma:
            raise SourceAbsent(f"neither {self.net_dev} nor {self.class_net} is readable")
        self.malformed_total += bad
        return NetworkPart(
            nics=tuple(out),
            rdma=tuple(rdma),
            malformed_lines=bad,
            malformed_lines_total=self.malformed_total,
            read_at=read_at,
        )

    def _index(self, name: str) -> int | None:
        if name not in self._indexes:
            text = self._files.read(f"{self.class_net}/{name}/ifindex")
            self._indexes[name] = int(text) if text and text.strip().isdigit() else None
        return self._indexes[name]

    def _ports(self) -> list[_PortFiles]:
        devices = sorted(_listdir(self.ib_root))
        now = time.monotonic()
        if devices != self._layout_devices or now - self._layout_at > LAYOUT_REFRESH_SECONDS:
            self._layout = [pf for d in devices for pf in rdma_layout(self.ib_root, d)]
            if not devices and self._layout_devices is None:
                log.warning("cannot see RDMA", path=str(self.ib_root), hint="no InfiniBand/RoCE/eRDMA device")
            self._layout_devices = devices
            self._layout_at = now
        return self._layout

    def close(self) -> None:
        self._files.close()
