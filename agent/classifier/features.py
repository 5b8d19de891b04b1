"""Window -> the measurements the verdict is made of (pure).

Every GPU sample is one of: *working* (real work: SM activity from GPM, else power above idle
relative to the limit), *spinning* (utilization high without real work: a collective waiting, as
NCCL does), *starved* (utilization low: nothing to run) or in between. ``utilization.gpu`` alone is
never taken as work.

Pipeline pressures are measured *while the GPUs wait*: each sample is weighted by the share of its
GPUs that were starved (storage, CPU) or waiting (network), so a link that is busy only while the
GPUs compute does not make the node network-bound, and a short full-speed burst after a straggler
arrives does not hide that the network was quiet while this node's GPUs spun.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain, groupby, repeat
from operator import add, attrgetter, is_, mul

from agent.classifier.baselines import Baselines, capacity, idle_power, quantile
from agent.classifier.samples import Sample, columns
from agent.config.classifier import ClassifierSection

_KEYS = attrgetter("keys")


def ramp(value: float | None, r: tuple[float, float]) -> float:
    if value is None:
        return 0.0
    start, full = r
    if value <= start:
        return 0.0
    if value >= full:
        return 1.0
    return (value - start) / (full - start)


@dataclass(frozen=True, slots=True)
class Load:
    """One device's throughput while the GPUs waited, against its capacity."""

    kind: str  # disk | nfs | nic | rdma
    name: str
    rate: float  # bytes/s, weighted mean
    capacity: float | None
    source: str  # config | learned | link | unknown
    utilization: float | None
    pressure: float


@dataclass(frozen=True, slots=True)
class Signal:
    """A pressure that is not a throughput (iowait, PSI, RTT, busy time, congestion)."""

    what: str  # "iowait", "psi_io", "disk_busy", "nfs_rtt", "cnp", "xmit_wait"
    name: str  # device/mount/port, "" for host-wide
    value: float
    baseline: float | None
    pressure: float


@dataclass(frozen=True, slots=True)
class Features:
    samples: int
    span_seconds: float
    gpus: int
    util_mean: float | None = None
    util_p5: float | None = None
    util_p95: float | None = None
    work_mean: float | None = None  # mean real-work measure 0-1
    work_source: str = "none"  # sm | power | sm+power | utilization | none
    working_share: float = 0.0
    spin_share: float = 0.0
    starved_share: float = 0.0
    spin_util: float | None = None  # mean utilization of spinning samples
    spin_work: float | None = None  # mean real work of spinning samples
    trainers: int | None = None  # None: cannot tell
    trainer_label: str = ""
    storage: tuple[Load, ...] = ()  # busiest first
    storage_signals: tuple[Signal, ...] = ()
    storage_pressure: float = 0.0
    cpu_cores: float | None = None
    cpu_allowed: float | None = None
    cpu_saturation: float | None = None
    cpu_pressure: float = 0.0
    links_wait: tuple[Load, ...] = ()  # NIC/RDMA while the GPUs waited, busiest first
    links_spin: tuple[Load, ...] = ()  # while they spun
    congestion: tuple[Signal, ...] = ()
    network_pressure: float = 0.0  # while waiting
    network_pressure_spin: float = 0.0  # while spinning
    waiting_gpus: tuple[int, ...] = ()  # GPUs that spent most of the window not working
    health: tuple[str, ...] = field(default=())


class Weights:
    """Per-sample weights, with the weighted samples grouped into runs of equal weight.

    The weights take few distinct values (the share of a node's GPUs that waited), so a weighted sum
    over a window is a handful of C-level slice sums per series instead of one multiply per sample.
    """

    __slots__ = ("order", "runs", "total", "values")

    def __init__(self, values: list[float]) -> None:
        self.values = values
        self.total = sum(values)
        # samples of weight 0 (no GPU waited) are left out altogether: a healthy window costs little
        order = sorted((i for i, w in enumerate(values) if w > 0), key=values.__getitem__)
        self.order = order
        self.runs: list[tuple[int, int, float]] = []
        start = 0
        for w, group in groupby(map(values.__getitem__, order)):
            end = start + sum(1 for _ in group)
            self.runs.append((start, end, w))
            start = end


def weighted(samples: Sequence[Sample], weights: Weights, *attrs: str) -> list[dict[str, float]]:
    """Weighted mean per series name of each family in ``attrs``; a sample without a series counts
    as 0 for it."""
    total = weights.total
    if total <= 0:
        return [{} for _ in attrs]
    fams = [list(map(attrgetter(a), samples)) for a in attrs]
    firsts = [fam[0].keys for fam in fams]
    if not all(all(map(is_, map(_KEYS, fam), repeat(k))) for fam, k in zip(fams, firsts, strict=True)):
        # devices came or went inside the window: the slow, general way
        return [
            {k: sum(map(mul, col, weights.values)) / total for k, col in columns(samples, a).items()}
            for a in attrs
        ]
    # the usual case, the same devices all window long: per run of equal weight, column sums in C,
    # then one multiply-add per column and run
    out: list[dict[str, float]] = []
    order, runs = weights.order, weights.runs
    for fam, keys in zip(fams, firsts, strict=True):
        if not keys:
            out.append({})
            continue
        rows = [fam[i].values for i in order]
        acc: list[float] = []
        for a, b, w in runs:
            part = [sum(col) * w for col in zip(*rows[a:b], strict=True)]
            acc = list(map(add, acc, part)) if acc else part
        out.append({k: v / total for k, v in zip(keys, acc, strict=True)})
    return out


def _weighted_scalar(samples: Sequence[Sample], weights: Weights, attr: str) -> float | None:
    num = den = 0.0
    for s, w in zip(samples, weights.values, strict=True):
        v = getattr(s, attr)
        if v is not None:
            num += w * v
            den += w
    return num / den if den else None


_Row = tuple[float, float, float, str, str, "float | None", str]  # pressure, util, rate, kind, name ...


def _loads(
    kind: str,
    rates: dict[str, float],
    links: dict[str, float],
    baselines: Baselines,
    cfg: ClassifierSection,
    r: tuple[float, float],
) -> list[_Row]:
    out: list[_Row] = []
    configured = getattr(cfg, f"{kind}_capacity")
    peaks = baselines.peaks.get(kind, {})
    for name, rate in rates.items():
        if name in configured or name in links or name in peaks:
            cap, source = capacity(kind, name, baselines, cfg, links.get(name))
        else:
            cap, source = None, "unknown"
        util = rate / cap if cap else None
        out.append((ramp(util, r), util or 0.0, rate, kind, name, cap, source))
    return out


def _busiest(rows: list[_Row], keep: int = 3) -> tuple[Load, ...]:
    rows.sort(key=lambda x: x[:3], reverse=True)
    return tuple(
        Load(k, n, rate, cap, src, cap and rate / cap, p) for p, _, rate, k, n, cap, src in rows[:keep]
    )


@dataclass(frozen=True, slots=True)
class GpuTally:
    """One sample's GPUs, sorted into working / spinning / starved."""

    n: int = 0
    working: int = 0
    spinning: int = 0
    starved: int = 0
    utils: tuple[float, ...] = ()
    work_sum: float = 0.0
    spin_util_sum: float = 0.0
    spin_work_sum: float = 0.0
    seen: tuple[int, ...] = ()
    not_working: tuple[int, ...] = ()
    throttled: tuple[tuple[int, int], ...] = ()  # (gpu index, clocks event reasons)
    sources: frozenset[str] = frozenset()


def tally(s: Sample, baselines: Baselines, cfg: ClassifierSection) -> GpuTally:
    """Pure; the engine memoizes it per sample, so a sliding window sorts each GPU sample once."""
    busy_sm = cfg.busy_sm_active
    busy_pw = cfg.busy_power_ratio
    spin_u = cfg.spin_utilization
    starve_u = cfg.starved_utilization
    utils: list[float] = []
    seen: list[int] = []
    not_working: list[int] = []
    throttled: list[tuple[int, int]] = []
    sources: set[str] = set()
    working = spinning = starved = 0
    work_sum = spin_util_sum = spin_work_sum = 0.0
    for g in s.gpus:
        util = g.util
        if not g.up or util is None:
            continue
        if g.sm is not None:
            work = g.sm
            is_working = work >= busy_sm
            sources.add("sm")
        elif g.power is not None and g.limit:
            idle = idle_power(g.uuid, g.limit, baselines, cfg)
            span = g.limit - idle
            work = min(1.0, max(0.0, (g.power - idle) / span)) if span > 0 else 0.0
            is_working = work >= busy_pw
            sources.add("power")
        else:  # nothing but utilization: cannot tell a spin from work
            work = util
            is_working = util >= spin_u
            sources.add("utilization")
        utils.append(util)
        seen.append(g.index)
        work_sum += work
        if is_working:
            working += 1
        else:
            not_working.append(g.index)
            if util >= spin_u:
                spinning += 1
                spin_util_sum += util
                spin_work_sum += work
            elif util < starve_u:
                starved += 1
        if g.throttle:
            throttled.append((g.index, g.throttle))
    return GpuTally(
        len(utils),
        working,
        spinning,
        starved,
        tuple(utils),
        work_sum,
        spin_util_sum,
        spin_work_sum,
        tuple(seen),
        tuple(not_working),
        tuple(throttled),
        frozenset(sources),
    )


def measure(
    window: Sequence[Sample],
    baselines: Baselines,
    cfg: ClassifierSection,
    tallies: Sequence[GpuTally] | None = None,
) -> Features:
    """``tallies``, one per sample, may be passed in when already known (they are ``tally(s, ...)``)."""
    n = len(window)
    if n == 0:
        return Features(samples=0, span_seconds=0.0, gpus=0)
    if tallies is None:
        tallies = [tally(s, baselines, cfg) for s in window]
    ts = [t for t in tallies if t.n]
    gpu_samples = sum([t.n for t in ts])
    working = sum([t.working for t in ts])
    spinning = sum([t.spinning for t in ts])
    starved = sum([t.starved for t in ts])
    work_sum = sum([t.work_sum for t in ts])
    spin_util_sum = sum([t.spin_util_sum for t in ts])
    spin_work_sum = sum([t.spin_work_sum for t in ts])
    utils = list(chain.from_iterable([t.utils for t in ts]))
    sources = set().union(*[t.sources for t in ts])
    seen_gpus = Counter(chain.from_iterable([t.seen for t in ts]))
    not_working = Counter(chain.from_iterable([t.not_working for t in ts]))
    throttled = Counter(chain.from_iterable([t.throttled for t in ts]))
    # samples in which no GPU waited weigh nothing: a healthy window costs next to nothing
    w_starved = [t.starved / t.n if t.n else 0.0 for t in tallies]
    w_spin = [t.spinning / t.n if t.n else 0.0 for t in tallies]
    w_wait = [(t.spinning + t.starved) / t.n if t.n else 0.0 for t in tallies]

    starving, waiting, spinning_w = Weights(w_starved), Weights(w_wait), Weights(w_spin)

    # --- storage, while starved ---
    disk, nfs, busy, rtt_time, nfs_ops = weighted(
        window, starving, "disk_read", "nfs_read", "disk_busy", "nfs_rtt_time", "nfs_ops"
    )
    storage = _busiest(
        _loads("disk", disk, {}, baselines, cfg, cfg.storage_read_utilization)
        + _loads("nfs", nfs, {}, baselines, cfg, cfg.storage_read_utilization)
    )
    signals: list[Signal] = []
    iowait = _weighted_scalar(window, starving, "iowait")
    if iowait is not None:
        signals.append(Signal("iowait", "", iowait, None, ramp(iowait, cfg.iowait)))
    psi = _weighted_scalar(window, starving, "psi_io")
    if psi is not None:
        signals.append(Signal("psi_io", "", psi, None, ramp(psi, cfg.psi_io)))
    # per-device signals only where they press: a large node has dozens of quiet ones
    for dev, b in busy.items():
        if b > cfg.disk_busy[0]:
            signals.append(Signal("disk_busy", dev, b, None, ramp(b, cfg.disk_busy)))
    for mount, t in rtt_time.items():
        ops = nfs_ops.get(mount)
        if not ops:
            continue
        rtt = t / ops  # mean READ RTT, each READ weighted by how starved the GPUs were meanwhile
        base = baselines.nfs_rtt.get(mount)
        p = ramp(rtt / base if base else None, cfg.nfs_rtt_ratio) if rtt >= cfg.nfs_rtt_floor else 0.0
        if p > 0:
            signals.append(Signal("nfs_rtt", mount, rtt, base, p))
    signals.sort(key=lambda x: x.pressure, reverse=True)
    storage_pressure = max([x.pressure for x in storage[:1]] + [x.pressure for x in signals[:1]] + [0.0])

    # --- the trainer's CPU, while starved ---
    cores, allowed, saturation = _trainer_means(window, starving)

    # --- network: while waiting (network-bound) and while spinning (sync-wait) ---
    links_wait, congestion = _network(window, waiting, baselines, cfg)
    links_spin, cong_spin = _network(window, spinning_w, baselines, cfg)
    net_wait = max([x.pressure for x in links_wait[:1] + congestion[:1]] + [0.0])
    net_spin = max([x.pressure for x in links_spin[:1] + cong_spin[:1]] + [0.0])

    trainers = window[-1].trainers
    trainer_count = None
    if trainers is not None:
        # a job present in any sample of the window counts: NVML's process list can flicker
        trainer_count = max(len(s.trainers.keys) for s in window if s.trainers is not None)
    label = next((s.trainers.label for s in reversed(window) if s.trainers and s.trainers.keys), "")

    util_mean = util_p5 = util_p95 = None
    if utils:
        util_mean = sum(utils) / len(utils)
        util_p5 = quantile(utils, 0.05)
        util_p95 = quantile(utils, 0.95)
    waiting = tuple(
        sorted(i for i, k in not_working.items() if k * 2 > seen_gpus.get(i, 0)) if not_working else ()
    )
    return Features(
        samples=n,
        span_seconds=window[-1].t - window[0].t,
        gpus=len(seen_gpus),
        util_mean=util_mean,
        util_p5=util_p5,
        util_p95=util_p95,
        work_mean=work_sum / gpu_samples if gpu_samples else None,
        work_source="+".join(sorted(sources)) if sources else "none",
        working_share=working / gpu_samples if gpu_samples else 0.0,
        spin_share=spinning / gpu_samples if gpu_samples else 0.0,
        starved_share=starved / gpu_samples if gpu_samples else 0.0,
        spin_util=spin_util_sum / spinning if spinning else None,
        spin_work=spin_work_sum / spinning if spinning else None,
        trainers=trainer_count,
        trainer_label=label,
        storage=storage,
        storage_signals=tuple(signals),
        storage_pressure=storage_pressure,
        cpu_cores=cores,
        cpu_allowed=allowed,
        cpu_saturation=saturation,
        cpu_pressure=ramp(saturation, cfg.cpu_saturation),
        links_wait=links_wait,
        links_spin=links_spin,
        congestion=congestion,
        network_pressure=net_wait,
        network_pressure_spin=net_spin,
        waiting_gpus=waiting,
        health=_health(window, throttled),
    )


def _trainer_means(window: Sequence[Sample], weights: Weights) -> tuple[float | None, ...]:
    """Weighted means of the trainers' cores, allowed cores and saturation."""
    sums = [0.0, 0.0, 0.0]
    dens = [0.0, 0.0, 0.0]
    for s, w in zip(window, weights.values, strict=True):
        t = s.trainers
        if t is None:
            continue
        for i, v in enumerate((t.cores, t.allowed, t.saturation)):
            if v is not None:
                sums[i] += w * v
                dens[i] += w
    return tuple(x / d if d else None for x, d in zip(sums, dens, strict=True))


def _network(
    window: Sequence[Sample], weights: Weights, baselines: Baselines, cfg: ClassifierSection
) -> tuple[tuple[Load, ...], tuple[Signal, ...]]:
    """NIC/RDMA loads (busiest first) and RDMA congestion signals under these weights."""
    nic, rdma, cnp, xmit_wait = weighted(window, weights, "nic", "rdma", "rdma_cnp", "rdma_xmit_wait")
    last = window[-1]
    loads = _busiest(
        _loads("nic", nic, last.nic_speed, baselines, cfg, cfg.network_utilization)
        + _loads("rdma", rdma, last.rdma_rate, baselines, cfg, cfg.network_utilization)
    )
    congestion = [
        Signal(what, port, v, None, ramp(v, r))
        for what, values, r in (
            ("cnp", cnp, cfg.rdma_cnp_per_second),
            ("xmit_wait", xmit_wait, cfg.rdma_xmit_wait_per_second),
        )
        for port, v in values.items()
        if v > r[0]
    ]
    return loads, tuple(sorted(congestion, key=lambda x: x.pressure, reverse=True))


_THROTTLE_NAMES = {
    0x4: "at its power cap",
    0x8: "hardware slowdown",
    0x20: "thermal throttling (software)",
    0x40: "thermal throttling (hardware)",
    0x80: "power brake",
}


def _health(window: Sequence[Sample], throttled: dict[tuple[int, int], int]) -> tuple[str, ...]:
    """GPU health shown beside the verdict: lost GPUs, new Xids, throttling in >= 20% of samples."""
    notes: list[str] = []
    last = window[-1]
    first_xids = {g.uuid: g.xids for g in window[0].gpus}
    for g in last.gpus:
        if not g.up:
            notes.append(f"GPU {g.index} lost (fell off the bus)")
        new = g.xids - first_xids.get(g.uuid, g.xids)
        if new > 0:
            notes.append(f"GPU {g.index}: {new} Xid error{'s' if new > 1 else ''} in the window")
    n = len(window)
    per_bit: dict[tuple[int, int], int] = {}
    for (index, reasons), count in throttled.items():
        for bit in _THROTTLE_NAMES:
            if reasons & bit:
                per_bit[(index, bit)] = per_bit.get((index, bit), 0) + count
    for (index, bit), count in sorted(per_bit.items()):
        if count * 5 >= n:
            notes.append(f"GPU {index} {_THROTTLE_NAMES[bit]} {count * 100 // n}% of the time")
    return tuple(notes)
