"""The classifier's families, declared once and read by name.

A *family* is one per-device ``Series`` of a :class:`~agent.classifier.samples.Sample` that the
verdict counts: :class:`FamilyMeans` names them all, and its field order is the one order the running
sums keep (``FAMILIES``), so a consumer reads ``means.nic``, never a position, and a family added
anywhere in the list shifts nothing.

A *capacity kind* is a family that is a throughput against a capacity (``disk`` reads against the
device's, ``nic`` traffic against the link's): :data:`CAPACITIES` says for each which family it is,
which side of the verdict it weighs on, what the sample reports as the link's speed, how the reasons
name it, and which key of the status JSON ``top`` shows it from. The baselines learn a peak per kind,
the config takes ``[classifier] <kind>_capacity``, the loads and the reasons read the kind from here.

tests/classifier/test_classifier_families.py walks both and names the consumer that lacks a piece.
"""

from __future__ import annotations

from typing import Literal, NamedTuple


class FamilyMeans(NamedTuple):
    """Window means per device of each family (device -> mean over the window's samples)."""

    disk_read: dict[str, float]  # bytes/s
    nfs_read: dict[str, float]  # bytes/s from the server
    disk_busy: dict[str, float]  # io_time share
    nfs_rtt_time: dict[str, float]  # READ RTT seconds per second
    nfs_ops: dict[str, float]  # READs/s
    nic: dict[str, float]  # max(rx, tx) bytes/s
    rdma: dict[str, float]  # max(rx, tx) bytes/s
    rdma_cnp: dict[str, float]  # CNPs/s
    rdma_xmit_wait: dict[str, float]  # port_xmit_wait ticks/s


FAMILIES: tuple[str, ...] = FamilyMeans._fields


class Capacity(NamedTuple):
    kind: str  # the Load's kind, the baselines' peaks key, ``[classifier] <kind>_capacity``
    family: str  # its family in FamilyMeans (and the Sample)
    side: Literal["storage", "network"]  # storage: against the starved share; network: the waits
    label: str  # how the reasons name it
    status_key: str  # the snapshot's key of the status JSON that lists its devices (``top``)
    links: str | None = None  # the Sample's field of link speeds (device -> bytes/s), where reported


CAPACITIES: tuple[Capacity, ...] = (
    Capacity("disk", "disk_read", "storage", "disk", "disks"),
    Capacity("nfs", "nfs_read", "storage", "NFS", "nfs"),
    Capacity("nic", "nic", "network", "NIC", "nics", links="nic_speed"),
    Capacity("rdma", "rdma", "network", "RDMA", "rdma", links="rdma_rate"),
)
KINDS: tuple[str, ...] = tuple(c.kind for c in CAPACITIES)
BY_KIND: dict[str, Capacity] = {c.kind: c for c in CAPACITIES}
STORAGE: tuple[Capacity, ...] = tuple(c for c in CAPACITIES if c.side == "storage")
NETWORK: tuple[Capacity, ...] = tuple(c for c in CAPACITIES if c.side == "network")
