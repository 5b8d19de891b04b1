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

from collections.abc import Callable, Sequence
from functools import partial
from itertools import chain, repeat
from operator import attrgetter, is_, is_not, itemgetter, le, truediv
from typing import NamedTuple

from agent.classifier.baselines import Baselines
from agent.classifier.families import FAMILIES, NETWORK, STORAGE, FamilyMeans
from agent.classifier.health import health
from agent.classifier.host import HostFeatures, measure_host
from agent.classifier.loads import Cap, Load, Signal, busiest, capacities, congestion, storage_signals
from agent.classifier.ramp import per_wait, ramp
from agent.classifier.samples import Sample, Trainers, columns
from agent.classifier.shapes import SHAPES
from agent.classifier.slowgpu import SlowGpu, slow_gpus
from agent.classifier.tallies import GpuTally, GpuWindow, combine, tally
from agent.classifier.traffic import Traffic, traffic
from agent.config.classifier import ClassifierSection

__all__ = ["Features", "GpuTally", "Load", "Signal", "measure", "per_wait", "ramp", "tally"]

_KEYS = attrgetter("keys")
_VALUES = attrgetter("values")


class Features(NamedTuple):
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
    trainer_blocked: float | None = None  # share of samples a training process was blocked (state D)
    cpu_cores: float | None = None
    cpu_allowed: float | None = None
    cpu_saturation: float | None = None
    cpu_pressure: float = 0.0
    cpu_busiest: float | None = None  # the busiest process's cores (ran or waited to run), window mean
    cpu_pegged: float = 0.0  # processes at least at cpu_pegged[0], window mean
    cpu_pegged_level: float | None = None  # their mean cores each
    # the busiest input process's busy share over the GPUs' starved share, where that is pegged: per
    # second of starvation, for the main process (num_workers=0) and for a worker alike
    cpu_decoding: float | None = None
    # it is busy no longer than the GPUs starve: it works only while they wait (does not run ahead)
    cpu_synchronous: bool = False
    cpu_workers: int = 0  # data-loader workers (descendants of the training processes)
    cpu_ranks: int = 0  # training processes
    cpu_idle_cores: float | None = None  # allowed cores nothing ran on, window mean
    links_wait: tuple[Load, ...] = ()  # NIC/RDMA against the waiting share, busiest first
    links_spin: tuple[Load, ...] = ()  # against the spinning share
    congestion: tuple[Signal, ...] = ()
    traffic: tuple[Traffic, ...] = ()  # the busiest links judged by their traffic, most pressing first
    network_pressure: float = 0.0  # while waiting
    network_pressure_spin: float = 0.0  # while spinning
    input_pressure: float = 0.0  # input streamed over a link while the GPUs starve (network-input)
    streamed: Traffic | None = None  # the link that input_pressure was read from
    trainer_nonblock_read: float | None = None  # bytes/s read() gave that no block device fetched
    waiting_gpus: tuple[int, ...] = ()  # GPUs that spent most of the window not working
    slow_gpus: tuple[SlowGpu, ...] = ()  # GPUs that work while their peers wait for them
    health: tuple[str, ...] = ()
    host: HostFeatures = HostFeatures()  # what the training process itself did while they waited
    # each host shape's pressure (agent.classifier.shapes), in SHAPES' order
    host_pressures: tuple[tuple[str, float], ...] = ()


def window_means(window: Sequence[Sample]) -> FamilyMeans:
    """Each family's means over the window, as the running sums keep them."""
    return FamilyMeans._make(means(window, *FAMILIES))


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


def measure(
    window: Sequence[Sample],
    baselines: Baselines,
    cfg: ClassifierSection,
    tallies: Sequence[GpuTally] | None = None,
    family_means: FamilyMeans | None = None,
    gpus: GpuWindow | None = None,
) -> Features:
    """``tallies`` (one ``tally(s, ...)`` per sample), ``family_means`` (``window_means(window)``)
    and ``gpus`` (``combine(tallies)``) may be passed in when the caller keeps them up
    to date already."""
    n = len(window)
    if n == 0:
        return Features(samples=0, span_seconds=0.0, gpus=0)
    if tallies is None:
        tallies = [tally(s, baselines, cfg) for s in window]
    g = combine(tallies) if gpus is None else gpus
    starved_share = g.share(g.starved)
    spin_share = g.share(g.spinning)
    wait_share = starved_share + spin_share

    # --- storage, per second of starvation ---
    m = window_means(window) if family_means is None else family_means
    last = window[-1]
    storage = busiest(
        _capacities(_STORAGE, m, last, baselines, cfg),
        starved_share,
        cfg.storage_read_utilization,
    )
    signals = storage_signals(window, starved_share, m.disk_busy, m.nfs_rtt_time, m.nfs_ops, baselines, cfg)
    io_pressure = max([x.pressure for x in storage[:1]] + [x.pressure for x in signals[:1]] + [0.0])

    # --- the trainer's CPU: data-loader workers prefetch, so over the whole window ---
    trainers = list(filter(_NOT_NONE, map(_TRAINERS, window)))
    cores, allowed, saturation, trainer_read, idle_cores, nonblock, blocked = _trainer_means(trainers)
    top, pegged, pegged_level = _pegged(trainers, cfg.cpu_pegged[0])
    workers = last.trainers.workers if last.trainers else 0
    decoding = None
    synchronous = False
    if top is not None and starved_share > 0:
        # a decoder that works only while its GPUs wait (num_workers=0's training process, the one
        # worker of a synchronous pool map) is pegged in the samples where it decodes and asleep in
        # the others: the whole window's mean hides it (starved 75% with the decoder busy 55%), and
        # so does a count of pegged samples. Per second of starvation it is plain
        share = min(1.0, top / starved_share)
        if share >= cfg.cpu_pegged[0]:
            decoding = share
            # pegged over the window it may as well run ahead all the time (GPUs starved 95%): only a
            # decoder that also rests while they work tells a synchronous pipeline
            synchronous = top <= starved_share + SYNCHRONOUS_SLACK and top < cfg.cpu_pegged[1]
    busiest_share = max(top or 0.0, decoding or 0.0)
    # host-wide I/O pressure is the job's only when the job reads: a neighbour's backup, logging or
    # another container's I/O must not make a CPU-bound trainer "storage-bound"
    storage_gate = 1.0
    if trainer_read is not None and starved_share > 0 and cfg.trainer_read_floor > 0:
        storage_gate = min(1.0, trainer_read / starved_share / cfg.trainer_read_floor)
        if blocked is not None:
            # a read that outlasts the window (a slow disk's large read, an NFS server that stalls)
            # completes no bytes in it: a training process blocked in it is the job waiting all the same
            storage_gate = max(storage_gate, ramp(min(1.0, blocked / starved_share), cfg.trainer_blocked))

    # --- network: per second of waiting (network-bound) and of spinning (sync-wait) ---
    net_means = {kind: family(m) for kind, family, _ in _NETWORK}
    net_links = {kind: links(last) for kind, _, links in _NETWORK}
    caps = _capacities(_NETWORK, m, last, baselines, cfg)
    links_wait = busiest(caps, wait_share, cfg.network_utilization)
    links_spin = busiest(caps, spin_share, cfg.network_utilization)
    cong_wait = congestion(m.rdma_cnp, m.rdma_xmit_wait, wait_share, cfg)
    cong_spin = congestion(m.rdma_cnp, m.rdma_xmit_wait, spin_share, cfg)
    works, starves = list(map(_WORK, tallies)), list(map(_STARVE, tallies))
    moved = traffic(
        window,
        list(map(_WAIT, tallies)),
        works,
        starves,
        net_means,
        net_links,
        baselines,
        cfg,
        sum(m.nfs_read.values()),
    )
    by_traffic = moved[0].pressure if moved else 0.0
    # input streamed over a link: as for storage, a decoder that runs all the time is not waiting on it
    streamed = max(moved, key=_INPUT_PRESSURE, default=None)
    input_pressure = (
        streamed.input_pressure * (1.0 - ramp(busiest_share, cfg.cpu_pegged)) if streamed else 0.0
    )
    net_wait = max([x.pressure for x in links_wait[:1] + cong_wait[:1]] + [by_traffic])
    net_spin = max([x.pressure for x in links_spin[:1] + cong_spin[:1]] + [by_traffic])

    trainer_count = None
    if last.trainers is not None:
        # a job present in any sample of the window counts: NVML's process list can flicker
        trainer_count = max(map(len, map(_KEYS, trainers)))
    label = next((t.label for t in reversed(trainers) if t.keys), "")
    gpu_samples = g.gpu_samples
    f = Features(
        samples=n,
        span_seconds=last.t - window[0].t,
        gpus=g.gpus,
        util_mean=g.util_mean,
        util_p5=g.util_p5,
        util_p95=g.util_p95,
        work_mean=g.work_sum / gpu_samples if gpu_samples else None,
        work_source="+".join(sorted(g.sources)) if g.sources else "none",
        working_share=g.share(g.working),
        spin_share=spin_share,
        starved_share=starved_share,
        spin_util=g.spin_util_sum / g.spinning if g.spinning else None,
        spin_work=g.spin_work_sum / g.spinning if g.spinning else None,
        trainers=trainer_count,
        trainer_label=label,
        storage=storage,
        storage_signals=tuple(signals),
        # a training process or worker that runs (or waits to run) all the time is not waiting on I/O:
        # the node's I/O pressure counts against the job only as far as its decoders are not pegged
        storage_pressure=io_pressure * storage_gate * (1.0 - ramp(busiest_share, cfg.cpu_pegged)),
        io_pressure=io_pressure,
        trainer_read=trainer_read,
        trainer_blocked=blocked,
        cpu_cores=cores,
        cpu_allowed=allowed,
        cpu_saturation=saturation,
        cpu_pressure=max(ramp(saturation, cfg.cpu_saturation), ramp(busiest_share, cfg.cpu_pegged)),
        cpu_busiest=top,
        cpu_pegged=pegged,
        cpu_pegged_level=pegged_level,
        cpu_decoding=decoding,
        cpu_synchronous=synchronous,
        cpu_workers=workers,
        cpu_ranks=last.trainers.ranks if last.trainers else 0,
        cpu_idle_cores=idle_cores,
        traffic=moved,
        links_wait=links_wait,
        links_spin=links_spin,
        congestion=cong_wait,
        network_pressure=net_wait,
        network_pressure_spin=net_spin,
        input_pressure=input_pressure,
        streamed=streamed,
        trainer_nonblock_read=nonblock,
        waiting_gpus=g.waiting,
        slow_gpus=slow_gpus(g, last),
        health=health(window, g.throttled),
        host=measure_host(window, tallies, starves, works),
    )
    held = tuple((k, sh.pressure(f, cfg)) for k, sh in SHAPES.items())
    # a copy of ~70 fields costs more than the shapes: only where a shape holds something
    return f._replace(host_pressures=held) if any(p for _, p in held) else f


def _no_links(last: Sample) -> dict[str, float]:
    return {}  # a device kind whose sample reports no link speeds (disks, NFS mounts)


# each capacity kind with its family in the means and its link speeds in the last sample
_Spec = tuple[str, Callable[[FamilyMeans], dict[str, float]], Callable[[Sample], dict[str, float]]]
_STORAGE: tuple[_Spec, ...] = tuple((c.kind, attrgetter(c.family), _no_links) for c in STORAGE)
_NETWORK: tuple[_Spec, ...] = tuple(
    (c.kind, attrgetter(c.family), attrgetter(c.links) if c.links else _no_links) for c in NETWORK
)


def _capacities(
    specs: Sequence[_Spec], m: FamilyMeans, last: Sample, baselines: Baselines, cfg: ClassifierSection
) -> list[Cap]:
    out: list[Cap] = []
    for kind, family, links in specs:
        out += capacities(kind, family(m), links(last), baselines, cfg)
    return out


_TRAINERS = attrgetter("trainers")
_WAIT = attrgetter("wait")
_WORK = attrgetter("work")
_STARVE = attrgetter("starve")
_INPUT_PRESSURE = attrgetter("input_pressure")
# busy this much longer than the GPUs starve and a decoder still counts as working only while they
# wait: the sampling smears a decode across the interval in which the step began
SYNCHRONOUS_SLACK = 0.15
_NOT_NONE = partial(is_not, None)
_TRAINER_FIELDS = tuple(
    map(attrgetter, ("cores", "allowed", "saturation", "read", "idle_cores", "nonblock_read", "blocked"))
)
_BUSY = attrgetter("busy")


def _trainer_means(trainers: Sequence[Trainers]) -> tuple[float | None, ...]:
    """Means of the trainers' cores, allowed cores, saturation, read rate, idle cores, non-block
    read rate and blocked share (each over the samples that have it)."""
    out: list[float | None] = []
    for get in _TRAINER_FIELDS:
        vals = list(filter(_NOT_NONE, map(get, trainers)))
        out.append(sum(vals) / len(vals) if vals else None)
    return tuple(out)


def _pegged(trainers: Sequence[Trainers], level: float) -> tuple[float | None, float, float | None]:
    """The busiest training process or worker (mean over the window of each sample's busiest), how
    many were at least ``level`` busy on average, and how busy those were."""
    busy = list(filter(None, map(_BUSY, trainers)))
    if not busy:
        return None, 0.0, None
    top = list(map(itemgetter(0), busy))
    hot = list(filter(partial(le, level), chain.from_iterable(busy)))
    return sum(top) / len(top), len(hot) / len(busy), (sum(hot) / len(hot) if hot else None)
