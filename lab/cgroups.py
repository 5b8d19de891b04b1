"""The trainer's cgroup: read bandwidth throttled on one disk, CPUs limited to one core.

cgroup v1 (``blkio.throttle.read_bps_device``, ``cpuset.cpus``) where those hierarchies are mounted;
cgroup v2 (``io.max``, ``cpuset.cpus`` or ``cpu.max``) otherwise. Created and removed by the lab.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _v2_root() -> Path | None:
    for p in (ROOT, ROOT / "unified"):
        if (p / "cgroup.controllers").exists():
            return p
    return None


class TrainerCgroup:
    def __init__(self, name: str, device: str, read_bps: int, cpus: str) -> None:
        self.name = name
        self.device = device
        self.read_bps = read_bps
        self.cpus = cpus
        self.dirs: list[Path] = []  # every cgroup directory a process must join
        self.how: list[str] = []

    def create(self) -> TrainerCgroup:
        v1_blkio = ROOT / "blkio"
        v1_cpuset = ROOT / "cpuset"
        v2 = _v2_root()
        v2_controllers = set((v2 / "cgroup.controllers").read_text().split()) if v2 else set()
        if (v1_blkio / "blkio.throttle.read_bps_device").exists():
            d = self._mkdir(v1_blkio)
            _write(d / "blkio.throttle.read_bps_device", f"{self.device} {self.read_bps}")
            self.how.append(f"v1 blkio.throttle.read_bps_device {self.device} {self.read_bps}")
        elif v2 and "io" in v2_controllers:
            _write(v2 / "cgroup.subtree_control", "+io")
            d = self._mkdir(v2)
            _write(d / "io.max", f"{self.device} rbps={self.read_bps}")
            self.how.append(f"v2 io.max {self.device} rbps={self.read_bps}")
        else:
            raise RuntimeError("neither cgroup v1 blkio nor cgroup v2 io is available to throttle reads")
        if (v1_cpuset / "cpuset.cpus").exists():
            d = self._mkdir(v1_cpuset)
            _write(d / "cpuset.mems", (v1_cpuset / "cpuset.mems").read_text().strip() or "0")
            _write(d / "cpuset.cpus", self.cpus)
            self.how.append(f"v1 cpuset.cpus {self.cpus}")
        elif v2 and "cpuset" in v2_controllers:
            _write(v2 / "cgroup.subtree_control", "+cpuset")
            d = self._mkdir(v2)
            _write(d / "cpuset.cpus", self.cpus)
            self.how.append(f"v2 cpuset.cpus {self.cpus}")
        elif v2 and "cpu" in v2_controllers:
            _write(v2 / "cgroup.subtree_control", "+cpu")
            d = self._mkdir(v2)
            _write(d / "cpu.max", "100000 100000")
            self.how.append("v2 cpu.max 100000 100000 (one core)")
        else:
            raise RuntimeError("no cpuset or cpu controller to hold the trainer to one core")
        return self

    def _mkdir(self, hierarchy: Path) -> Path:
        d = hierarchy / self.name
        if d not in self.dirs:
            d.mkdir(exist_ok=True)
            self.dirs.append(d)
        return d

    def join(self, pid: int = 0) -> None:
        """Move ``pid`` (0: the calling process) in; used from the trainer's ``preexec_fn``."""
        for d in self.dirs:
            _write(d / "cgroup.procs", str(pid or os.getpid()))

    def remove(self) -> None:
        for d in reversed(self.dirs):
            for _ in range(50):
                with contextlib.suppress(OSError):
                    for pid in (d / "cgroup.procs").read_text().split():
                        with contextlib.suppress(OSError):
                            _write(d.parent / "cgroup.procs", pid)
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)  # processes still leaving
        self.dirs = []
