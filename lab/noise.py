"""Background noise beside a lab job, as on a shared node: a neighbour reading the disk, a busy
process that has nothing to do with training. Each ends by itself after ``--seconds``.

    python -m lab.noise --kind disk --path /dev/loop3 --seconds 20
    python -m lab.noise --kind cpu --seconds 20
"""

from __future__ import annotations

import argparse
import hashlib
import mmap
import os
import time

CHUNK = 1 << 20
DISK_RATE = 12 << 20  # bytes/s the neighbour reads: a backup or log shipper, not a benchmark


def read_disk(path: str, seconds: float) -> None:
    """O_DIRECT reads (so they reach the device) at about ``DISK_RATE``, cycling over the file."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, CHUNK)
    size = os.lseek(fd, 0, os.SEEK_END) // CHUNK * CHUNK
    offset = 0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            if offset + CHUNK > size:
                offset = 0
            os.preadv(fd, [buf], offset)
            offset += CHUNK
            time.sleep(CHUNK / DISK_RATE)
    finally:
        os.close(fd)


def burn(seconds: float) -> None:
    h = hashlib.sha256()
    block = bytes(1 << 16)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(64):
            h.update(block)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=("disk", "cpu"), required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--path", help="file or device to read (disk)")
    args = ap.parse_args()
    if args.kind == "disk":
        read_disk(args.path, args.seconds)
    else:
        burn(args.seconds)


if __name__ == "__main__":
    main()
