"""Writing lines into the real kernel log, as the NVIDIA driver would (root only).

Each write opens /dev/kmsg anew: the kernel rate-limits writes per open file (printk.devkmsg=ratelimit,
10 lines per 5 s). A line written from user space gets facility 1 (user), not the kernel's 0; the
agent reads it all the same. Tests name GPUs by a PCI domain of their own, so the agents of tests
running beside them, reading the same log, see an address no GPU of theirs has.
"""

from __future__ import annotations

import os
import random

import pytest

KMSG = "/dev/kmsg"


def need_kmsg_writer() -> None:
    if os.geteuid() != 0:
        pytest.skip("writing driver lines into /dev/kmsg needs root (run the suite as root)")
    if not os.access(KMSG, os.W_OK):
        pytest.skip(f"{KMSG} is not writable here")


def own_domain() -> int:
    """A PCI domain no real GPU of this machine and no other test uses."""
    return random.randrange(0x1000, 0xFFFF)


def write_xid(
    domain: int, bus: int, xid: int, text: str = "GPU has fallen off the bus.", pid: str = "<unknown>"
) -> str:
    """The driver's r535 form of an Xid line, written at level 3 (err); later drivers quote the pid
    (``pid='<unknown>'``)."""
    line = f"NVRM: Xid (PCI:{domain:04x}:{bus:02x}:00): {xid}, pid={pid}, name=<unknown>, {text}"
    with open(KMSG, "w") as f:
        f.write(f"<3>{line}\n")
    return line
