"""The pipelines' devices against the time the GPUs waited (pure): each disk, NFS mount, NIC and RDMA
port's throughput set against its capacity per second of waiting (a :class:`Load`), and the pressures
that are not throughputs (iowait, PSI, busy time, NFS RTT, RDMA congestion: a :class:`Signal`).

A large node has dozens of quiet devices; these run every evaluation, so the per-device work is kept
to plain arithmetic and each device's capacity is looked up once per change of the config, the
learned peaks or the device list.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from itertools import repeat
from operator import attrgetter, is_not, itemgetter, neg
from typing import NamedTuple

from agent.classifier.baselines import Baselines, capacity
from agent.classifier.ramp import ramp
from agent.classifier.samples import Sample
from agent.config.classifier import ClassifierSection


class Load(NamedTuple):
    """One device's throughput over the window, against its capacity while the GPUs waited."""

    kind: str  # disk | nfs | nic | rdma
    name: str
    rate: float  # bytes/s, mean over the window
    capacity: float | None
    source: str  # config | learned | link | unknown
    utilization: float | None  # rate / (capacity x share): capacity used per second of waiting
    share: float  # the share of the window the GPUs waited (starved, waiting or spinning)
    pressure: float


class Signal(NamedTuple):
    """A pressure that is not a throughput (iowait, PSI, RTT, busy time, congestion)."""

    what: str  # "iowait", "psi_io", "disk_busy", "nfs_rtt", "cnp", "xmit_wait"
    name: str  # device/mount/port, "" for host-wide
    value: float  # per second of waiting (rates, shares) or as measured (RTT)
    baseline: float | None
    pressure: float


Cap = tuple[str, str, float, "float | None", str]  # kind, name, mean rate, capacity, source
_CapList = tuple[tuple["float | None", ...], tuple[str, ...]]
_CAP_MEMO: dict[str, tuple[object, object, dict[tuple, _CapList]]] = {}


def capacities(
    kind: str, rates: dict[str, float], links: dict[str, float], baselines: Baselines, cfg: ClassifierSection
) -> list[Cap]:
    """Each device of ``rates`` with its mean rate and capacity, in ``rates`` order."""
    peaks = baselines.peaks.get(kind, {})
    # a capacity changes only with the config or a learned peak: remembered per device list and
    # link speeds, which stay the same evaluation after evaluation
    memo = _CAP_MEMO.get(kind)
    if memo is None or memo[0] is not cfg or memo[1] is not peaks:
        memo = _CAP_MEMO[kind] = (cfg, peaks, {})
    names = tuple(rates)
    key = (names, tuple(links.items()))
    hit = memo[2].get(key)
    if hit is None:
        configured = getattr(cfg, f"{kind}_capacity")
        found = []
        for name in names:
            link = links.get(name)
            if name in configured or link or name in peaks:
                found.append(capacity(kind, name, baselines, cfg, link))
            else:
                found.append((None, "unknown"))
        hit = (tuple(c for c, _ in found), tuple(s for _, s in found))
        if len(memo[2]) < 64:
            memo[2][key] = hit
    return list(zip(repeat(kind), names, rates.values(), hit[0], hit[1]))


_RATE = itemgetter(2)


def busiest(caps: Sequence[Cap], share: float, r: tuple[float, float], keep: int = 3) -> tuple[Load, ...]:
    """The ``keep`` devices under most pressure when their traffic is set against ``share``: by
    pressure, then utilization, then rate, in ``caps`` order where all three tie."""
    lo, hi = r
    # capacity used per second of waiting; the pressure never falls as it rises, so ranking by
    # (utilization, rate) ranks by (pressure, utilization, rate), and only the kept rows need one
    if share > 0:
        utils = [rate / cap / share if cap else 0.0 for _, _, rate, cap, _ in caps]
    else:
        utils = [0.0] * len(caps)
    # the negated position keeps equal rows in ``caps`` order under reverse=True
    rows = zip(utils, map(_RATE, caps), map(neg, range(len(caps))), strict=True)
    ranked = sorted(rows, reverse=True)[:keep]
    out = []
    for util, _, at in ranked:
        kind, name, rate, cap, source = caps[-at]
        if cap and share > 0:
            p = 0.0 if util <= lo else 1.0 if util >= hi else (util - lo) / (hi - lo)
            out.append(Load(kind, name, rate, cap, source, util, share, p))
        else:
            out.append(Load(kind, name, rate, cap, source, None, share, 0.0))
    return tuple(out)


_NOT_NONE = partial(is_not, None)


def scalar_mean(window: Sequence[Sample], attr: str) -> float | None:
    values = list(filter(_NOT_NONE, map(attrgetter(attr), window)))
    return sum(values) / len(values) if values else None


def storage_signals(
    window: Sequence[Sample],
    starved_share: float,
    busy: dict[str, float],
    rtt_time: dict[str, float],
    nfs_ops: dict[str, float],
    baselines: Baselines,
    cfg: ClassifierSection,
) -> list[Signal]:
    """iowait, PSI and disk busy time per second of starvation, and NFS READ RTTs against their
    baselines; most pressing first."""
    signals: list[Signal] = []
    if starved_share > 0:
        for what, value, r in (
            ("iowait", scalar_mean(window, "iowait"), cfg.iowait),
            ("psi_io", scalar_mean(window, "psi_io"), cfg.psi_io),
        ):
            if value is not None:
                v = min(1.0, value / starved_share)
                signals.append(Signal(what, "", v, None, ramp(v, r)))
        # per-device signals only where they press: a large node has dozens of quiet ones
        r = cfg.disk_busy
        for dev, b in busy.items():
            v = b / starved_share
            if v > 1.0:
                v = 1.0
            if v > r[0]:
                signals.append(Signal("disk_busy", dev, v, None, ramp(v, r)))
    floor, r = cfg.nfs_rtt_floor, cfg.nfs_rtt_ratio
    base_rtt = baselines.nfs_rtt
    for mount, t in rtt_time.items():
        ops = nfs_ops.get(mount)
        if not ops:
            continue
        rtt = t / ops  # mean READ RTT over the window's READs: a property of the server and path
        if rtt < floor:
            continue
        base = base_rtt.get(mount)
        p = ramp(rtt / base if base else None, r)
        if p > 0:
            signals.append(Signal("nfs_rtt", mount, rtt, base, p))
    signals.sort(key=_PRESSURE, reverse=True)
    return signals


_PRESSURE = attrgetter("pressure")


def congestion(
    cnp: dict[str, float], xmit_wait: dict[str, float], share: float, cfg: ClassifierSection
) -> tuple[Signal, ...]:
    """CNPs and port_xmit_wait ticks per second of waiting, where they press."""
    if share <= 0:
        return ()
    out = [
        Signal(what, port, v / share, None, ramp(v / share, r))
        for what, values, r in (
            ("cnp", cnp, cfg.rdma_cnp_per_second),
            ("xmit_wait", xmit_wait, cfg.rdma_xmit_wait_per_second),
        )
        for port, v in values.items()
        if v / share > r[0]
    ]
    return tuple(sorted(out, key=_PRESSURE, reverse=True))
