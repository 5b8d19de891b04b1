"""/proc/net/dev: per-interface byte, packet, drop and error counters."""

from __future__ import annotations

from collections.abc import Callable

from agent.sources.host.parse import Parsed, counters
from agent.sources.network.part import NicStat

FIELDS = 16  # 8 receive columns, then 8 transmit columns


def parse_net_dev(text: str, skip: Callable[[str], object] | None = None) -> Parsed[list[NicStat]]:
    """Counters per interface; ``speed_bytes`` is left ``None`` (it comes from sysfs). ``skip(name)``
    true leaves an interface out before its numbers are parsed (loopback, veths)."""
    nics: list[NicStat] = []
    bad = 0
    for line in text.splitlines():
        if "|" in line or not line.strip():
            continue  # the two header lines
        # an interface name cannot contain ':', and old kernels print "eth0:123" with no space
        name, sep, rest = line.partition(":")
        f = rest.split()
        name = name.strip()
        if not sep or not name or len(f) < FIELDS:
            bad += 1
            continue
        if skip is not None and skip(name):
            continue
        n = counters(f[:FIELDS])
        if n is None:
            bad += 1
            continue
        nics.append(
            NicStat(
                device=name,
                rx_bytes=n[0],
                tx_bytes=n[8],
                rx_packets=n[1],
                tx_packets=n[9],
                rx_drops=n[3],
                tx_drops=n[11],
                rx_errors=n[2],
                tx_errors=n[10],
                speed_bytes=None,
            )
        )
    return Parsed(nics, bad)
