"""Window -> the measurements the verdict is made of (pure).

Every GPU sample is one of: *working* (real work: SM activity from GPM, else power above idle
relative to the limit), *spinning* (utilization high without real work: a collective waiting, as
NCCL does), *starved* (utilization low: nothing to run) or in between. ``utilization.gpu`` alone is
never taken as work.

A pipeline's pressure is measured *per second of waiting*: what a disk read (or a NIC moved, or how
long tasks stalled on I/O) over the window, divided by the time the GPUs spent starved (or waiting,
or spinning). When the disk reads only while the GPUs starve, that is the disk's utilization during
starvation; it does not need the sampling to resolve individual training steps, which at a 1 s
interval it cannot (a 300 ms step is mostly inside one sample). A link saturated whenever the GPUs
wait scores ~100%; the few KB a straggler-bound node exchanges after spinning score ~0%.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, repeat
from operator import attrgetter, is_, is_not, truediv

from agent.classifier.baselines import Baselines, capacity, quantile
from agent.classifier.gpus import work_of
from agent.classifier.health import health
from agent.classifier.ramp import per_wait, ramp
from agent.classifier.running import FAMILIES
from agent.classifier.samples import Sample, columns
from agent.classifier.traffic import Traffic, traffic
from agent.config.classifier import ClassifierSection

__all__ = ["Features", "GpuTally", "Load", "Signal", "measure", "per_wait", "ramp", "tally"]

_KEYS = attrgetter("keys")
_VALUES = attrgetter("values")


@dataclass(frozen=True, slots=True)
class Load:
    """One device's throughput over the window, against its capacity while the GPUs waited."""

    kind: str  # disk | nfs | nic | rdma
    name: str
    rate: float  # bytes/s, mean over the window
    capacity: float | None
    source: str  # config | learned | link | unknown
    utilization: float | None  # rate / (capacity x share): capacity used per second of waiting
    share: float  # the share of the window the GPUs waited (starved, waiting or spinning)
    pressure: float


@dataclass(frozen=True, slots=True)
class Signal:
    """A pressure that is not a throughput (iowait, PSI, RTT, busy time, congestion)."""

    what: str  # "iowait", "psi_io", "disk_busy", "nfs_rtt", "cnp", "xmit_wait"
    name: str  # device/mount/port, "" for host-wide
    value: float  # per second of waiting (rates, shares) or as measured (RTT)
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
    work_source: str = "none"  # sm | power | power+sm | utilization | none
    working_share: float = 0.0
    spin_share: float = 0.0
    starved_share: float = 0.0
    spin_util: float | None = None  # mean utilization of spinning samples
    spin_work: float | None = None  # mean real work of spinning samples
    trainers: int | None = None  # None: cannot tell
    trainer_label: str = ""
    storage: tuple[Load, ...] = ()  # busiest first, against the starved share
    storage_signals: tuple[Signal, ...] = ()
    storage_pressure: float = 0.0  # io_pressure, as far as the training processes' reads explain it
    io_pressure: float = 0.0  # the node's, whoever causes it
    trainer_read: float | None = None  # bytes/s the training processes read, mean over the window
    cpu_cores: float | None = None
    cpu_allowed: float | None = None
    cpu_saturation: float | None = None
    cpu_pressure: float = 0.0
    cpu_busiest: float | None = None  # the busiest process's cores (ran or waited to run), window mean
    cpu_pegged: float = 0.0  # processes at least at cpu_pegged[0], window mean
    cpu_pegged_level: float | None = None  # their mean cores each
    cpu_workers: int = 0  # data-loader workers (descendants of the training processes)
    cpu_ranks: int = 0  # training processes
    cpu_idle_cores: float | None = None  # allowed cores nothing ran on, window mean
    links_wait: tuple[Load, ...] = ()  # NIC/RDMA against the waiting share, busiest first
    links_spin: tuple[Load, ...] = ()  # against the spinning share
    congestion: tuple[Signal, ...] = ()
    traffic: tuple[Traffic, ...] = ()  # the busiest links judged by their traffic, most pressing first
    network_pressure: float = 0.0  # while waiting
    network_pressure_spin: float = 0.0  # while spinning
    waiting_gpus: tuple[int, ...] = ()  # GPUs that spent most of the window not working
    health: tuple[str, ...] = field(default=())


def means(window: Sequence[Sample], *attrs: str) -> list[dict[str, float]]:
    """Mean per series of each family over the window (a sample without the series counts 0)."""
    n = len(window)
    out = []
    for a in attrs:
        fam = list(map(attrgetter(a), window))
        keys = fam[0].keys
        if all(map(is_, map(_KEYS, fam), repeat(keys))):  # the same devices all window long: in C
            sums = map(sum, zip(*map(_VALUES, fam), strict=True))
            out.append(dict(zip(keys, map(truediv, sums, repeat(n)), strict=True)))
        else:
            out.append({k: sum(col) / n for k, col in columns(window, a).items()})
    return out


def _scalar_mean(window: Sequence[Sample], attr: str) -> float | None:
    values = [v for s in window if (v := getattr(s, attr)) is not None]
    return sum(values) / len(values) if values else None


_Cap = tuple[str, str, float, "float | None", str]  # kind, name, mean rate, capacity, source
_CAP_MEMO: dict[str, tuple[object, object, dict[tuple[str, float | None], tuple[float | None, str]]]] = {}


def _capacities(
    kind: str, rates: dict[str, float], links: dict[str, float], baselines: Baselines, cfg: ClassifierSection
) -> list[_Cap]:
    configured = getattr(cfg, f"{kind}_capacity")
    peaks = baselines.peaks.get(kind, {})
    # a capacity changes only with the config or a learned peak: remembered per (device, link speed)
    memo = _CAP_MEMO.get(kind)
    if memo is None or memo[0] is not cfg or memo[1] is not peaks:
        memo = _CAP_MEMO[kind] = (cfg, peaks, {})
    known = memo[2]
    out: list[_Cap] = []
    for name, rate in rates.items():
        link = links.get(name)
        hit = known.get((name, link))
        if hit is None:
            if name in configured or link or name in peaks:
                hit = capacity(kind, name, baselines, cfg, link)
            else:
                hit = (None, "unknown")
            if len(known) < 4096:
                known[(name, link)] = hit
        out.append((kind, name, rate, hit[0], hit[1]))
    return out


def _busiest(caps: list[_Cap], share: float, r: tuple[float, float], keep: int = 3) -> tuple[Load, ...]:
    """The ``keep`` devices under most pressure when their traffic is set against ``share``."""
    rows = []
    for kind, name, rate, cap, source in caps:
        util = per_wait(rate / cap, share) if cap else None
        rows.append((ramp(util, r), util or 0.0, rate, kind, name, cap, source, util))
    rows.sort(key=lambda x: x[:3], reverse=True)
    return tuple(Load(k, n, rate, cap, src, u, share, p) for p, _, rate, k, n, cap, src, u in rows[:keep])


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
        work, is_working, source = work_of(g, baselines, cfg)
        sources.add(source)
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
    family_means: Sequence[dict[str, float]] | None = None,
) -> Features:
    """``tallies`` (one ``tally(s, ...)`` per sample) and ``family_means`` (``means(window,
    *FAMILIES)``) may be passed in when the caller keeps them up to date already."""
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
    starved_share = starved / gpu_samples if gpu_samples else 0.0
    spin_share = spinning / gpu_samples if gpu_samples else 0.0
    wait_share = starved_share + spin_share

    # --- storage, per second of starvation ---
    if family_means is None:
        family_means = means(window, *FAMILIES)
    disk, nfs, busy, rtt_time, nfs_ops, nic, rdma, cnp, xmit_wait = family_means
    storage = _busiest(
        _capacities("disk", disk, {}, baselines, cfg) + _capacities("nfs", nfs, {}, baselines, cfg),
        starved_share,
        cfg.storage_read_utilization,
    )
    signals: list[Signal] = []
    if starved_share > 0:
        for what, value, r in (
            ("iowait", _scalar_mean(window, "iowait"), cfg.iowait),
            ("psi_io", _scalar_mean(window, "psi_io"), cfg.psi_io),
        ):
            if value is not None:
                v = min(1.0, value / starved_share)
                signals.append(Signal(what, "", v, None, ramp(v, r)))
        # per-device signals only where they press: a large node has dozens of quiet ones
        for dev, b in busy.items():
            v = min(1.0, b / starved_share)
            if v > cfg.disk_busy[0]:
                signals.append(Signal("disk_busy", dev, v, None, ramp(v, cfg.disk_busy)))
    for mount, t in rtt_time.items():
        ops = nfs_ops.get(mount)
        if not ops:
            continue
        rtt = t / ops  # mean READ RTT over the window's READs: a property of the server and path
        base = baselines.nfs_rtt.get(mount)
        p = ramp(rtt / base if base else None, cfg.nfs_rtt_ratio) if rtt >= cfg.nfs_rtt_floor else 0.0
        if p > 0:
            signals.append(Signal("nfs_rtt", mount, rtt, base, p))
    signals.sort(key=lambda x: x.pressure, reverse=True)
    io_pressure = max([x.pressure for x in storage[:1]] + [x.pressure for x in signals[:1]] + [0.0])

    # --- the trainer's CPU: data-loader workers prefetch, so over the whole window ---
    cores, allowed, saturation, trainer_read, idle_cores = _trainer_means(window)
    busiest, pegged, pegged_level = _pegged(window, cfg.cpu_pegged[0])
    # host-wide I/O pressure is the job's only when the job reads: a neighbour's backup, logging or
    # another container's I/O must not make a CPU-bound trainer "storage-bound"
    storage_gate = 1.0
    if trainer_read is not None and starved_share > 0 and cfg.trainer_read_floor > 0:
        storage_gate = min(1.0, trainer_read / starved_share / cfg.trainer_read_floor)

    # --- network: per second of waiting (network-bound) and of spinning (sync-wait) ---
    last = window[-1]
    caps = _capacities("nic", nic, last.nic_speed, baselines, cfg) + _capacities(
        "rdma", rdma, last.rdma_rate, baselines, cfg
    )
    links_wait = _busiest(caps, wait_share, cfg.network_utilization)
    links_spin = _busiest(caps, spin_share, cfg.network_utilization)
    congestion = _congestion(cnp, xmit_wait, wait_share, cfg)
    cong_spin = _congestion(cnp, xmit_wait, spin_share, cfg)
    wait = [(t.spinning + t.starved) / t.n if t.n else 0.0 for t in tallies]
    work = [t.working / t.n if t.n else 0.0 for t in tallies]
    moved = traffic(
        window,
        wait,
        work,
        {"nic": nic, "rdma": rdma},
        {"nic": last.nic_speed, "rdma": last.rdma_rate},
        baselines,
        cfg,
    )
    by_traffic = moved[0].pressure if moved else 0.0
    net_wait = max([x.pressure for x in links_wait[:1] + congestion[:1]] + [by_traffic])
    net_spin = max([x.pressure for x in links_spin[:1] + cong_spin[:1]] + [by_traffic])

    trainers = last.trainers
    trainer_count = None
    if trainers is not None:
        # a job present in any sample of the window counts: NVML's process list can flicker
        trainer_count = max(len(s.trainers.keys) for s in window if s.trainers is not None)
    label = next((s.trainers.label for s in reversed(window) if s.trainers and s.trainers.keys), "")

    util_mean = util_p5 = util_p95 = None
    if utils:
        util_mean = sum(utils) / len(utils)
        utils.sort()  # once for both quantiles (quantile sorts a sorted list in linear time)
        util_p5 = quantile(utils, 0.05)
        util_p95 = quantile(utils, 0.95)
    waiting = tuple(sorted(i for i, k in not_working.items() if k * 2 > seen_gpus.get(i, 0)))
    return Features(
        samples=n,
        span_seconds=last.t - window[0].t,
        gpus=len(seen_gpus),
        util_mean=util_mean,
        util_p5=util_p5,
        util_p95=util_p95,
        work_mean=work_sum / gpu_samples if gpu_samples else None,
        work_source="+".join(sorted(sources)) if sources else "none",
        working_share=working / gpu_samples if gpu_samples else 0.0,
        spin_share=spin_share,
        starved_share=starved_share,
        spin_util=spin_util_sum / spinning if spinning else None,
        spin_work=spin_work_sum / spinning if spinning else None,
        trainers=trainer_count,
        trainer_label=label,
        storage=storage,
        storage_signals=tuple(signals),
        # a training process or worker that runs (or waits to run) all the time is not waiting on I/O:
        # the node's I/O pressure counts against the job only as far as its decoders are not pegged
        storage_pressure=io_pressure * storage_gate * (1.0 - ramp(busiest, cfg.cpu_pegged)),
        io_pressure=io_pressure,
        trainer_read=trainer_read,
        cpu_cores=cores,
        cpu_allowed=allowed,
        cpu_saturation=saturation,
        cpu_pressure=max(ramp(saturation, cfg.cpu_saturation), ramp(busiest, cfg.cpu_pegged)),
        cpu_busiest=busiest,
        cpu_pegged=pegged,
        cpu_pegged_level=pegged_level,
        cpu_workers=last.trainers.workers if last.trainers else 0,
        cpu_ranks=last.trainers.ranks if last.trainers else 0,
        cpu_idle_cores=idle_cores,
        traffic=moved,
        links_wait=links_wait,
        links_spin=links_spin,
        congestion=congestion,
        network_pressure=net_wait,
        network_pressure_spin=net_spin,
        waiting_gpus=waiting,
        health=health(window, throttled),
    )


def _trainer_means(window: Sequence[Sample]) -> tuple[float | None, ...]:
    """Means of the trainers' cores, allowed cores, saturation, read rate and idle cores (each over the
    samples that have it); one pass, as this runs every evaluation."""
    trainers = [t for s in window if (t := s.trainers) is not None]
    out: list[float | None] = []
    for get in _TRAINER_FIELDS:
        vals = list(filter(_NOT_NONE, map(get, trainers)))
        out.append(sum(vals) / len(vals) if vals else None)
    return tuple(out)


_TRAINER_FIELDS = tuple(map(attrgetter, ("cores", "allowed", "saturation", "read", "idle_cores")))
_NOT_NONE = partial(is_not, None)


def _pegged(window: Sequence[Sample], level: float) -> tuple[float | None, float, float | None]:
    """The busiest training process or worker (mean over the window of each sample's busiest), how
    many were at least ``level`` busy on average, and how busy those were."""
    busy = [s.trainers.busy for s in window if s.trainers is not None and s.trainers.busy]
    if not busy:
        return None, 0.0, None
    top = [b[0] for b in busy]
    hot = [x for b in busy for x in b if x >= level]
    return sum(top) / len(top), len(hot) / len(busy), (sum(hot) / len(hot) if hot else None)


def _congestion(
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
    return tuple(sorted(out, key=lambda x: x.pressure, reverse=True))
