"""A data file whose reads really reach a block device, and the device to throttle.

Batches are read with O_DIRECT, so the page cache never serves them and every byte crosses the
cgroup's read throttle. The throttle needs the whole disk's ``major:minor`` (blk-throttle acts on a
disk's request queue, not on a partition). When the file's filesystem has no block device of its
own (overlayfs, tmpfs, btrfs subvolumes report an anonymous device) or refuses O_DIRECT, the data
lives on a loop device made from a file instead, and batches are read from ``/dev/loopN`` directly.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

ALIGN = 4096


@dataclass
class DataSource:
    path: Path  # what the trainer opens with O_DIRECT: a file or a loop device
    size: int
    device: str  # "major:minor" of the whole disk to throttle
    disk_name: str  # e.g. "vda": the name /proc/diskstats and the agent use
    loop: str | None = None  # the loop device the lab created, if any

    def close(self) -> None:
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop], capture_output=True)
            self.loop = None


def whole_disk(major: int, minor: int) -> tuple[str, str] | None:
    """``("maj:min", name)`` of the disk holding this device (itself when it is not a partition)."""
    sysdir = Path(f"/sys/dev/block/{major}:{minor}")
    if not sysdir.exists():
        return None
    real = sysdir.resolve()
    if (real / "partition").exists():
        real = real.parent
    try:
        dev = (real / "dev").read_text().strip()
    except OSError:
        return None
    return dev, real.name


def direct_io_works(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return False
    try:
        buf = mmap.mmap(-1, ALIGN)
        os.preadv(fd, [buf], 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _fill(path: Path, size: int) -> None:
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(size // len(chunk)):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())


def make_data(workdir: Path, size: int = 64 << 20) -> DataSource:
    path = workdir / "dataset.bin"
    _fill(path, size)
    st = os.stat(path)
    disk = whole_disk(os.major(st.st_dev), os.minor(st.st_dev))
    if disk is not None and direct_io_works(path):
        return DataSource(path, size, disk[0], disk[1])
    # no real block device under this filesystem: a loop device over the file is one
    out = subprocess.run(["losetup", "--find", "--show", str(path)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"no block device under {path} and losetup failed: {out.stderr.strip()}")
    loop = out.stdout.strip()
    st = os.stat(loop)
    found = whole_disk(os.major(st.st_rdev), os.minor(st.st_rdev))
    if found is None:
        subprocess.run(["losetup", "-d", loop], capture_output=True)
        raise RuntimeError(f"{loop} has no /sys/dev/block entry")
    return DataSource(Path(loop), size, found[0], found[1], loop=loop)


class DirectReader:
    """Reads ``batch`` bytes at a time with O_DIRECT, cycling over the source."""

    def __init__(self, path: Path, size: int, batch: int) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        self.size = size - size % batch
        self.batch = batch
        self.buf = mmap.mmap(-1, batch)  # page-aligned, as O_DIRECT wants
        self.offset = 0

    def read(self, nbytes: int | None = None) -> int:
        """One batch of ``nbytes`` (rounded down to the alignment, at most ``batch``)."""
        n = min(self.batch, max(ALIGN, (nbytes or self.batch) // ALIGN * ALIGN))
        if self.offset + n > self.size:
            self.offset = 0
        got = os.preadv(self.fd, [memoryview(self.buf)[:n]], self.offset)
        self.offset += n
        return got

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
