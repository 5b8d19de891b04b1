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
from operator import mul

from agent.classifier.baselines import Baselines, capacity, idle_power, quantile
from agent.classifier.samples import Sample, columns
from agent.config.classifier import ClassifierSection

EPS = 1e-3  # weight every sample a little, so means exist even when the GPUs never waited


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


def weighted(samples: Sequence[Sample], weights: list[float], attr: str) -> dict[str, float]:
    """Weighted mean per series name; a sample without the series counts as 0 for it."""
    total = sum(weights)
    return {k: sum(map(mul, col, weights)) / total for k, col in columns(samples, attr).items()}


def _weighted_scalar(samples: Sequence[Sample], weights: list[float], attr: str) -> float | None:
    num = den = 0.0
    for s, w in zip(samples, weights, strict=True):
        v = getattr(s, attr)
        if v is not None:
            num += w * v
            den += w
    return num / den if den else None


def _loads(
    kind: str,
    rates: dict[str, float],
    links: dict[str, float],
    baselines: Baselines,
    cfg: ClassifierSection,
    r: tuple[float, float],
) -> list[Load]:
    out = []
    for name, rate in rates.items():
        cap, source = capacity(kind, name, baselines, cfg, links.get(name))
        util = rate / cap if cap else None
        out.append(Load(kind, name, rate, cap, source, util, ramp(util, r)))
    return out


def _busiest(loads: list[Load]) -> tuple[Load, ...]:
    return tuple(sorted(loads, key=lambda x: (x.pressure, x.utilization or 0.0, x.rate), reverse=True))


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
    utils: list[float] = []
    work_sum = spin_util_sum = spin_work_sum = 0.0
    sources: set[str] = set()
    w_starved: list[float] = []
    w_wait: list[float] = []
    w_spin: list[float] = []
    working = spinning = starved = gpu_samples = 0
    not_working: Counter[int] = Counter()
    seen_gpus: Counter[int] = Counter()
    throttled: Counter[tuple[int, int]] = Counter()
    for t in tallies:
        g_n = t.n
        if not g_n:
            w_starved.append(EPS)
            w_spin.append(EPS)
            w_wait.append(EPS)
            continue
        gpu_samples += g_n
        working += t.working
        spinning += t.spinning
        starved += t.starved
        utils.extend(t.utils)
        work_sum += t.work_sum
        spin_util_sum += t.spin_util_sum
        spin_work_sum += t.spin_work_sum
        sources |= t.sources
        seen_gpus.update(t.seen)
        not_working.update(t.not_working)
        if t.throttled:
            throttled.update(t.throttled)
        w_starved.append(t.starved / g_n + EPS)
        w_spin.append(t.spinning / g_n + EPS)
        w_wait.append((t.spinning + t.starved) / g_n + EPS)

    # --- storage, while starved ---
    disk = weighted(window, w_starved, "disk_read")
    nfs = weighted(window, w_starved, "nfs_read")
    storage = _busiest(
        _loads("disk", disk, {}, baselines, cfg, cfg.storage_read_utilization)
        + _loads("nfs", nfs, {}, baselines, cfg, cfg.storage_read_utilization)
    )
    signals: list[Signal] = []
    iowait = _weighted_scalar(window, w_starved, "iowait")
    if iowait is not None:
        signals.append(Signal("iowait", "", iowait, None, ramp(iowait, cfg.iowait)))
    psi = _weighted_scalar(window, w_starved, "psi_io")
    if psi is not None:
        signals.append(Signal("psi_io", "", psi, None, ramp(psi, cfg.psi_io)))
    for dev, busy in weighted(window, w_starved, "disk_busy").items():
        signals.append(Signal("disk_busy", dev, busy, None, ramp(busy, cfg.disk_busy)))
    for mount, rtt in _rtt_means(window, w_starved).items():
        base = baselines.nfs_rtt.get(mount)
        ratio = rtt / base if base else None
        p = ramp(ratio, cfg.nfs_rtt_ratio) if rtt >= cfg.nfs_rtt_floor else 0.0
        signals.append(Signal("nfs_rtt", mount, rtt, base, p))
    signals.sort(key=lambda x: x.pressure, reverse=True)
    storage_pressure = max([x.pressure for x in storage[:1]] + [x.pressure for x in signals[:1]] + [0.0])

    # --- the trainer's CPU, while starved ---
    cores = _trainer_mean(window, w_starved, "cores")
    allowed = _trainer_mean(window, w_starved, "allowed")
    saturation = _trainer_mean(window, w_starved, "saturation")

    # --- network: while waiting (network-bound) and while spinning (sync-wait) ---
    nic_speed = window[-1].nic_speed
    rdma_rate = window[-1].rdma_rate
    links_wait = _busiest(
        _loads("nic", weighted(window, w_wait, "nic"), nic_speed, baselines, cfg, cfg.network_utilization)
        + _loads("rdma", weighted(window, w_wait, "rdma"), rdma_rate, baselines, cfg, cfg.network_utilization)
    )
    links_spin = _busiest(
        _loads("nic", weighted(window, w_spin, "nic"), nic_speed, baselines, cfg, cfg.network_utilization)
        + _loads("rdma", weighted(window, w_spin, "rdma"), rdma_rate, baselines, cfg, cfg.network_utilization)
    )
    congestion = _congestion(window, w_wait, cfg)
    cong_p = congestion[0].pressure if congestion else 0.0
    net_wait = max(links_wait[0].pressure if links_wait else 0.0, cong_p)
    cong_spin = _congestion(window, w_spin, cfg)
    net_spin = max(links_spin[0].pressure if links_spin else 0.0, cong_spin[0].pressure if cong_spin else 0.0)

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


def _rtt_means(window: Sequence[Sample], weights: list[float]) -> dict[str, float]:
    """Mean READ RTT per mount, each READ weighted by how starved the GPUs were when it ran."""
    time = weighted(window, weights, "nfs_rtt_time")
    ops = weighted(window, weights, "nfs_ops")
    return {m: time[m] / ops[m] for m in time if ops.get(m)}


def _trainer_mean(window: Sequence[Sample], weights: list[float], attr: str) -> float | None:
    num = den = 0.0
    for s, w in zip(window, weights, strict=True):
        if s.trainers is not None:
            v = getattr(s.trainers, attr)
            if v is not None:
                num += w * v
                den += w
    return num / den if den else None


def _congestion(window: Sequence[Sample], weights: list[float], cfg: ClassifierSection) -> tuple[Signal, ...]:
    out = [
        Signal("cnp", port, v, None, ramp(v, cfg.rdma_cnp_per_second))
        for port, v in weighted(window, weights, "rdma_cnp").items()
    ] + [
        Signal("xmit_wait", port, v, None, ramp(v, cfg.rdma_xmit_wait_per_second))
        for port, v in weighted(window, weights, "rdma_xmit_wait").items()
    ]
    return tuple(sorted(out, key=lambda x: x.pressure, reverse=True))


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
