"""Traffic shapers on this node's NICs: the rate of a root ``tbf`` qdisc, read over rtnetlink.

A NIC's reported speed is only an upper bound (a veth says 10 Gb/s whatever it carries). Where the
node itself shapes the link (``tc qdisc add dev eth0 root tbf rate 20mbit``, as a bandwidth plugin
or an operator does), the kernel knows the real ceiling: the shaper's rate is the link's capacity
here, and it names the node whose own link holds a collective back. A cap in the hypervisor (a
cloud's bandwidth limit) is invisible here; the classifier's traffic test covers that case.

One ``RTM_GETQDISC`` dump per read (one round trip, no subprocess); :func:`parse_qdiscs` is pure and
tested on the kernel's own bytes. Only root tbf (and netem with a rate) count: an htb tree's rates
are per class, not the link's.
"""

from __future__ import annotations

import os
import socket
import struct

from agent.sources.host.parse import Parsed

RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
TC_H_ROOT = 0xFFFFFFFF
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_TBF_PARMS, TCA_TBF_RATE64 = 1, 4
TCA_NETEM_RATE, TCA_NETEM_RATE64 = 6, 8
_NLMSG = struct.Struct("=IHHII")
_TCMSG = struct.Struct("=B3xiIII")  # struct tcmsg
_RTA = struct.Struct("=HH")
_NETEM_QOPT = 24  # struct tc_netem_qopt: six u32, then the nested attributes


def _attrs(data: bytes, start: int = 0) -> dict[int, bytes]:
    """One level of rtattrs (type -> payload); a truncated attribute ends the walk."""
    out: dict[int, bytes] = {}
    i = start
    while i + 4 <= len(data):
        length, kind = _RTA.unpack_from(data, i)
        if length < 4 or i + length > len(data):
            break
        out[kind & 0x3FFF] = data[i + 4 : i + length]  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER
        i += (length + 3) & ~3
    return out


def _u64(b: bytes | None) -> int | None:
    return struct.unpack_from("=Q", b)[0] if b is not None and len(b) >= 8 else None


def _rate(kind: str, options: bytes) -> int | None:
    """Bytes/s of a root shaper, from its TCA_OPTIONS; None where the qdisc does not cap the link."""
    if kind == "tbf":
        opts = _attrs(options)
        rate64 = _u64(opts.get(TCA_TBF_RATE64))
        if rate64:
            return rate64
        parms = opts.get(TCA_TBF_PARMS)
        if parms is not None and len(parms) >= 12:
            return struct.unpack_from("=I", parms, 8)[0] or None  # tc_ratespec.rate
        return None
    if kind == "netem" and len(options) > _NETEM_QOPT:
        opts = _attrs(options, _NETEM_QOPT)
        rate64 = _u64(opts.get(TCA_NETEM_RATE64))
        if rate64:
            return rate64
        rate = opts.get(TCA_NETEM_RATE)
        if rate is not None and len(rate) >= 4:
            return struct.unpack_from("=I", rate)[0] or None
    return None


def parse_qdiscs(data: bytes) -> Parsed[dict[int, int]]:
    """ifindex -> the shaping rate (bytes/s) of its root qdisc, from an RTM_GETQDISC dump's bytes.
    A message that does not parse is counted, not raised."""
    out: dict[int, int] = {}
    bad = 0
    i = 0
    while i + _NLMSG.size <= len(data):
        length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(data, i)
        if length < _NLMSG.size or i + length > len(data):
            bad += 1
            break
        body = data[i + _NLMSG.size : i + length]
        i += (length + 3) & ~3
        if kind == NLMSG_DONE:
            break
        if kind != RTM_NEWQDISC:
            continue
        if len(body) < _TCMSG.size:
            bad += 1
            continue
        _family, ifindex, _handle, parent, _info = _TCMSG.unpack_from(body)
        if parent != TC_H_ROOT:
            continue
        attrs = _attrs(body, _TCMSG.size)
        name = attrs.get(TCA_KIND, b"").rstrip(b"\0").decode("ascii", "replace")
        rate = _rate(name, attrs.get(TCA_OPTIONS, b""))
        if rate:
            out[ifindex] = rate
    return Parsed(out, bad)


def dump_qdiscs(timeout: float = 0.5) -> bytes:
    """The kernel's answer to one RTM_GETQDISC dump in this network namespace (OSError on failure)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as s:
        s.settimeout(timeout)
        s.bind((0, 0))
        seq = os.getpid() & 0xFFFF
        req = _NLMSG.pack(_NLMSG.size + _TCMSG.size, RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, seq, 0)
        s.send(req + _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0))
        chunks = []
        while True:
            chunk = s.recv(65536)
            chunks.append(chunk)
            done = _last_type(chunk)
            if done in (NLMSG_DONE, NLMSG_ERROR) or not chunk or len(chunks) > 256:
                return b"".join(chunks)


def _last_type(chunk: bytes) -> int | None:
    """The type of the last message in one datagram of the dump."""
    i, kind = 0, None
    while i + _NLMSG.size <= len(chunk):
        length, kind, *_ = _NLMSG.unpack_from(chunk, i)
        if length < _NLMSG.size:
            break
        i += (length + 3) & ~3
    return kind
