"""The trainer's cgroup: read bandwidth throttled on one disk, and (only where a scenario asks for
one) a cpuset of a few cores.

cgroup v1 (``blkio.throttle.read_bps_device``, ``cpuset.cpus``) where those hierarchies are mounted;
cgroup v2 otherwise: ``io.max`` on the lab's cgroup, with two children (a process lives in exactly
one v2 cgroup, and only leaves hold processes): ``plain`` and ``cpu`` (``cpuset.cpus``, or
``cpu.max`` without the cpuset controller). Created and removed by the lab.
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
    def __init__(self, name: str, device: str, read_bps: int) -> None:
        self.name = name
        self.device = device
        self.read_bps = read_bps
        self.cpus = ""
        self.plain: list[Path] = []  # the directories a process joins without a cpuset
        self.cpu: list[Path] = []  # ... with one
        self.created: list[Path] = []  # in creation order (removed in reverse)
        self.how: list[str] = []
        self._throttle: Path | None = None
        self._v2 = False

    def create(self) -> TrainerCgroup:
        v1_blkio, v1_cpuset = ROOT / "blkio", ROOT / "cpuset"
        v2 = _v2_root()
        controllers = set((v2 / "cgroup.controllers").read_text().split()) if v2 else set()
        if (v1_blkio / "blkio.throttle.read_bps_device").exists():
            d = self._mkdir(v1_blkio / self.name)
            self._throttle = d / "blkio.throttle.read_bps_device"
            self.plain.append(d)
            self.cpu.append(d)
            self.how.append(f"v1 blkio.throttle.read_bps_device {self.device}")
        elif v2 and "io" in controllers:
            self._v2 = True
            want = "cpuset" if "cpuset" in controllers else "cpu"
            _write(v2 / "cgroup.subtree_control", f"+io +{want}")
            d = self._mkdir(v2 / self.name)
            self._throttle = d / "io.max"
            _write(d / "cgroup.subtree_control", f"+{want}")
            self.plain.append(self._mkdir(d / "plain"))
            self.cpu.append(self._mkdir(d / "cpu"))
            self.how.append(f"v2 io.max {self.device}, children plain and cpu ({want})")
        else:
            raise RuntimeError("neither cgroup v1 blkio nor cgroup v2 io is available to throttle reads")
        if not self._v2:
            if not (v1_cpuset / "cpuset.cpus").exists():
                raise RuntimeError("no v1 cpuset hierarchy to confine the trainer's cores")
            d = self._mkdir(v1_cpuset / self.name)
            _write(d / "cpuset.mems", (v1_cpuset / "cpuset.mems").read_text().strip() or "0")
            self.cpu.append(d)
            self.how.append("v1 cpuset.cpus")
        self.set_read_bps(self.read_bps)
        self.set_cpus(1)
        return self

    def _mkdir(self, d: Path) -> Path:
        d.mkdir(exist_ok=True)
        if d not in self.created:
            self.created.append(d)
        return d

    def set_read_bps(self, read_bps: int) -> None:
        assert self._throttle is not None
        self.read_bps = read_bps
        text = f"{self.device} rbps={read_bps}" if self._v2 else f"{self.device} {read_bps}"
        _write(self._throttle, text)

    def set_write_bps(self, write_bps: int) -> None:
        """The trainer's writes to the device at most ``write_bps`` (0: unthrottled). v1 blk-throttle
        sees the direct writes a process issues itself (O_DIRECT, its own fsync's), not the page
        cache's writeback, so the lab's slow volume is written with O_DIRECT."""
        assert self._throttle is not None
        if self._v2:
            _write(self._throttle, f"{self.device} wbps={write_bps or 'max'}")
        else:
            _write(self._throttle.with_name("blkio.throttle.write_bps_device"), f"{self.device} {write_bps}")

    def set_cpus(self, cores: int) -> str:
        """The cpuset holds ``cores`` CPUs, the highest-numbered ones (CPU 0 takes most of the box's
        interrupts); on v2 without the cpuset controller it is a ``cpu.max`` quota instead."""
        n = os.cpu_count() or 1
        cores = max(1, min(cores, n))
        spec = f"{n - cores}-{n - 1}" if cores > 1 else str(n - 1)
        for d in self.cpu:
            if (d / "cpuset.cpus").exists():
                _write(d / "cpuset.cpus", spec)
            elif (d / "cpu.max").exists():
                _write(d / "cpu.max", f"{cores * 100000} 100000")
        self.cpus = spec
        return spec

    def join(self, pid: int = 0, cpuset: bool = False) -> None:
        """Move ``pid`` (0: the calling process) in, confined to the cpuset or not; used from the
        trainer's ``preexec_fn``."""
        for d in self.cpu if cpuset else self.plain:
            _write(d / "cgroup.procs", str(pid or os.getpid()))

    def remove(self) -> None:
        for d in reversed(self.created):
            for _ in range(50):
                with contextlib.suppress(OSError):
                    for pid in (d / "cgroup.procs").read_text().split():
                        with contextlib.suppress(OSError):
                            _write(_top(d, self.name).parent / "cgroup.procs", pid)
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)  # processes still leaving
        self.created, self.plain, self.cpu = [], [], []


def _top(d: Path, name: str) -> Path:
    """The lab's own cgroup directory that ``d`` is (or is inside)."""
    while d.name != name and d.parent != d:
        d = d.parent
    return d
