"""The kernel log's records (``/dev/kmsg``) and the NVIDIA driver's Xid lines in them: pure parsers.

A read of /dev/kmsg returns one record (the kernel's Documentation/ABI/testing/dev-kmsg)::

    4,1234,5678901,-;NVRM: Xid (PCI:0000:18:00): 79, pid=<unknown>, GPU has fallen off the bus.
     SUBSYSTEM=pci

a prefix (``<facility*8+level>,<sequence>,<microseconds since boot>,<flags>[,...]``), a ``;``, the
message with unprintable bytes escaped as ``\\xNN``, and continuation lines that start with a space.

The driver names the GPU by its PCI address, in the forms it has used over the years::

    NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.       (r470 and later)
    NVRM: Xid (PCI:0000:b9:00): 74, pid=<unknown>, name=<unknown>, NVLink: ...  (r535 and later)
    NVRM: Xid (0000:01:00): 13, 0005 00000000 0000502d ...                      (r3xx)

NVML names the same GPU ``00000000:18:00.0`` (an 8-digit domain and the function): :func:`bus_key`
makes both one key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class MalformedRecord(ValueError):
    """A read of /dev/kmsg that is not a record: says what was wrong, with the text."""


@dataclass(frozen=True, slots=True)
class KmsgRecord:
    facility: int  # 0 for the kernel's own lines; a line written to /dev/kmsg from user space gets 1
    level: int
    seq: int
    usec: int  # since boot, on the kernel's clock
    message: str


@dataclass(frozen=True, slots=True)
class KernelXid:
    bus: tuple[int, int, int]  # (domain, bus, device): bus_key's form
    address: str  # as the line wrote it
    xid: int
    text: str  # the whole message


def parse_record(raw: bytes) -> KmsgRecord:
    text = raw.decode("utf-8", "replace")
    head, sep, rest = text.partition(";")
    if not sep:
        raise MalformedRecord(f"no ';' after the prefix: {text[:120]!r}")
    fields = head.split(",")
    if len(fields) < 4:
        raise MalformedRecord(f"prefix has {len(fields)} fields, not 4 or more: {head[:120]!r}")
    try:
        prio, seq, usec = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        raise MalformedRecord(f"prefix is not numbers: {head[:120]!r}") from None
    if prio < 0 or seq < 0 or usec < 0:
        raise MalformedRecord(f"negative field in the prefix: {head[:120]!r}")
    message = rest.split("\n", 1)[0]  # continuation lines (" KEY=value") are not the message
    return KmsgRecord(facility=prio >> 3, level=prio & 7, seq=seq, usec=usec, message=_unescape(message))


def _unescape(message: str) -> str:
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), message)


_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<address>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\):"
    r" ?(?P<xid>\d{1,5})\b"
)


def parse_xid(message: str) -> KernelXid | None:
    """The Xid a driver message reports, or None where the message is not an Xid line."""
    m = _XID.search(message)
    if m is None:
        return None
    key = bus_key(m.group("address"))
    if key is None:
        return None
    return KernelXid(bus=key, address=m.group("address"), xid=int(m.group("xid")), text=message.strip())


def bus_key(address: str) -> tuple[int, int, int] | None:
    """``[domain:]bus:device[.function]`` (NVML's ``00000000:18:00.0``, the driver's ``0000:18:00``)
    as (domain, bus, device); the function is left out, as the driver's lines leave it out."""
    parts = address.strip().lower().split(".", 1)[0].split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        return None
    try:
        domain, bus, device = (int(p, 16) for p in parts)
    except ValueError:
        return None
    return domain, bus, device
