"""The network source's snapshot part: NICs (/proc/net/dev, sysfs) and RDMA ports.

Counters are cumulative raw values as the kernel or driver reports them, converted to base units
(bytes, seconds); ``None`` always means "not available on this node", never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class NicStat:
    """Counters from /proc/net/dev; ``None`` for an interface only sysfs shows (another netns)."""

    device: str
    rx_bytes: int | None
    tx_bytes: int | None
    rx_packets: int | None
    tx_packets: int | None
    rx_drops: int | None
    tx_drops: int | None
    rx_errors: int | None
    tx_errors: int | None
    speed_bytes: int | None  # link capacity in bytes/s; None when unknown and not configured
    shaped_bytes: int | None = None  # the rate of a traffic shaper on it here (root tbf), bytes/s


@dataclass(frozen=True, slots=True)
class RdmaPort:
    device: str
    port: int
    rx_bytes: int | None
    tx_bytes: int | None
    rate_bytes: int | None  # link rate in bytes/s from ports/N/rate
    xmit_wait: int | None = None  # port_xmit_wait ticks
    cnp_sent: int | None = None  # np_cnp_sent (mlx5 hw_counters)
    cnp_handled: int | None = None  # rp_cnp_handled
    out_of_buffer: int | None = None


@dataclass(frozen=True, slots=True)
class NetworkPart:
    source: ClassVar[str] = "network"  # its source: snap.part(NetworkPart) finds it by this

    nics: tuple[NicStat, ...]
    rdma: tuple[RdmaPort, ...]
    malformed_lines: int = 0  # in this read
    malformed_lines_total: int = 0  # since the agent started
    read_at: float | None = field(default=None, compare=False)  # monotonic time its counters were read
