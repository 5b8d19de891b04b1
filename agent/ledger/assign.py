"""Where one tick of GPU time goes (pure): each GPU's state in the snapshot, the classifier's
pressures and the ledger's own state in, seconds per bucket out.

Every GPU is counted for the whole tick, in exactly one bucket or split between buckets by shares
that sum to one, so the buckets always add up to GPUs x elapsed time. Each GPU's seconds are also
booked to the job on it (``Tick.jobs``, ``no-job`` where there is none), so the jobs' seconds add
up to the same total (:func:`assign_jobs`).

A GPU's tick divides into *working*, *spinning* and *starved* time by the classifier's own shares
(SM activity from GPM, else power above idle, against the GPU's full-work level; ``utilization.gpu``
alone is never work), or it is *down*. A real GPU averages its readings over the tick, and a step is
0.1-2 s, so a tick is almost always a mix: a tick half working and half starved books half a second
``productive`` and half a second to the wait, not the whole second to whichever share is larger
(which booked a starved job's work at half what it did in the lab's draws). The
cause of a wait comes from the classifier's pressures in its latest window, split the way its scores
split them (see ``agent.classifier.scores``): a starved second is the input pipeline's as far as
storage, CPU or network-input pressure explains it, the network's as far as the network explains the rest, and
``idle`` otherwise; a spinning second is the network's as far as the network is loaded while the
GPUs spin, and ``sync-wait`` otherwise. Before either, the host shapes take what they explain
(``agent.classifier.shapes``): a save's starved seconds are ``checkpoint``, pageable copies'
``host-copy``, and a single process's spin with no collective to wait in ``host-launch``.
Where ``tna_client`` tells the trainer's saves and evaluations (``agent.sources.trainer``), the share
of the tick inside them is ``checkpoint`` and ``evaluation`` first, whatever the GPUs did in it, and
the rest of the tick divides as above.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from agent.classifier.published import NO_PRESSURES, GpuClass, Pressures, Published, Shares
from agent.core.vocabulary import Bucket
from agent.sources.gpu.part import ActivityWindow

NO_JOB = str(Bucket.NO_JOB)  # the job key of GPU-seconds of no scheduler job (jobs.part.NO_JOB)
BUCKETS: tuple[Bucket, ...] = tuple(Bucket)
INDEX: dict[Bucket, int] = {b: i for i, b in enumerate(BUCKETS)}
N = len(BUCKETS)
# the buckets' positions as plain ints: an enum's hash is a Python call, and assign() runs per GPU per tick
_NO_JOB, _CHECKPOINT, _PRODUCTIVE, _STARTUP, _IDLE = (
    INDEX[b] for b in (Bucket.NO_JOB, Bucket.CHECKPOINT, Bucket.PRODUCTIVE, Bucket.STARTUP, Bucket.IDLE)
)
_EVALUATION = INDEX[Bucket.EVALUATION]
_NETWORK, _SYNC_WAIT, _DATA_STORAGE, _DATA_CPU, _DATA_NETWORK = (
    INDEX[b]
    for b in (Bucket.NETWORK, Bucket.SYNC_WAIT, Bucket.DATA_STORAGE, Bucket.DATA_CPU, Bucket.DATA_NETWORK)
)
# what a GPU waiting during a periodic save was "doing": these seconds become ``checkpoint``
WAITING = (
    Bucket.DATA_STORAGE,
    Bucket.DATA_CPU,
    Bucket.DATA_NETWORK,
    Bucket.NETWORK,
    Bucket.SYNC_WAIT,
    Bucket.HOST_LAUNCH,
    Bucket.HOST_COPY,
    Bucket.IDLE,
    Bucket.STARTUP,
)


class GpuState(StrEnum):
    """A GPU's tick in one class: its largest share, or down (lost, or no reading)."""

    WORKING = "working"
    SPINNING = "spinning"
    STARVED = "starved"  # low utilization, or in between: nothing useful to run
    DOWN = "down"


class Split(NamedTuple):
    """How one GPU's tick divides; the three add up to 1."""

    working: float
    spinning: float
    starved: float


# what one GPU's tick is: its split, or a whole class (DOWN: no reading)
GpuTime = Split | GpuState
_WHOLE: dict[GpuState, Split | None] = {
    GpuState.WORKING: Split(1.0, 0.0, 0.0),
    GpuState.SPINNING: Split(0.0, 1.0, 0.0),
    GpuState.STARVED: Split(0.0, 0.0, 1.0),
    GpuState.DOWN: None,
}
# A job stops starting up at the first tick in which one of its GPUs worked this share of it. Not at
# any work at all: SM activity reads 0 without kernels, but power above the learned idle drifts by a
# few percent of the span while a job loads. Not at a tick mostly working either: a job starved from
# its first step (4-6% of each tick computing, in the lab's draws) would start up forever.
STARTUP_WORK = 0.05


class LedgerReading(NamedTuple):
    """What the ledger needs of one GPU in one snapshot. A named tuple rather than a frozen
    dataclass: one is made per GPU every tick, and a tuple costs a third as much to make."""

    uuid: str
    up: bool
    util: float | None  # 0-1
    sm: float | None  # GPM SM (or tensor) activity 0-1
    power: float | None  # watts
    limit: float | None  # watts
    busy: bool  # a compute process runs on it (NVML's list)
    windows: tuple[ActivityWindow, ...] = ()  # GPM inside the tick (the classifier splits by them)


@dataclass(frozen=True, slots=True)
class Tick:
    seconds: float  # elapsed since the previous snapshot
    gpus: tuple[LedgerReading, ...]
    job: bool  # a training process exists on the node (NVML or the process collector)
    pressures: Pressures = NO_PRESSURES
    checkpointing: bool = False  # a checkpoint request is open
    startup: bool = False  # a job appeared and has not done productive work yet
    # the scheduler job on each GPU (its key, ``NO_JOB`` where none), one per ``gpus``; empty: none
    jobs: tuple[str, ...] = ()
    saving: float = 0.0  # share of the tick the trainer said it spent in a save (tna_client)
    evaluating: float = 0.0  # ... in its evaluation loop


_STATE = {
    GpuClass.WORKING: GpuState.WORKING,
    GpuClass.SPINNING: GpuState.SPINNING,
    GpuClass.STARVED: GpuState.STARVED,
    GpuClass.DOWN: GpuState.DOWN,
}


def gpu_state(g: LedgerReading, classifier: Published) -> GpuState:
    """The classifier's sorting of one GPU sample, in the ledger's words."""
    return _STATE[classifier.gpu_class(g)]


def gpu_time(g: LedgerReading, classifier: Published) -> GpuTime:
    """How the classifier divides one GPU sample's time, in the ledger's words."""
    sh: Shares | None = classifier.gpu_shares(g)
    return GpuState.DOWN if sh is None else Split(sh.working, sh.spinning, sh.starved)


def _host(claims: tuple[tuple[Bucket, float], ...], out: list[float], seconds: float) -> float:
    """Books what the host shapes explain of ``seconds`` (the strongest one's pressure, shared by the
    shapes in proportion to theirs), and returns the seconds left for the other causes."""
    total = sum(p for _, p in claims)
    if total <= 0:  # no claim, or claims of no pressure (the classifier drops those): nothing explained
        return seconds
    held = min(1.0, max(p for _, p in claims))
    for bucket, p in claims:
        out[INDEX[bucket]] += seconds * held * p / total
    return seconds * (1.0 - held)


def _spinning(p: Pressures, out: list[float], seconds: float) -> None:
    seconds = _host(p.host_spin, out, seconds)
    net = min(1.0, max(0.0, p.network_spin))
    out[_NETWORK] += seconds * net
    out[_SYNC_WAIT] += seconds * (1.0 - net)


def _starved(p: Pressures, out: list[float], seconds: float) -> None:
    seconds = _host(p.host_starved, out, seconds)
    pipeline = min(1.0, max(0.0, p.storage, p.cpu, p.network_input))
    # the same sub-reason as the verdict's (scores.Scores.sub_reason): ties go to storage, then CPU
    data = _DATA_STORAGE
    if p.cpu > p.storage or p.network_input > p.storage:
        data = _DATA_CPU if p.cpu >= p.network_input else _DATA_NETWORK
    net = (1.0 - pipeline) * min(1.0, max(0.0, p.network))
    out[data] += seconds * pipeline
    out[_NETWORK] += seconds * net
    out[_IDLE] += seconds * (1.0 - pipeline - net)


def assign(tick: Tick, states: Sequence[GpuTime]) -> list[float]:
    """Seconds per bucket (in ``BUCKETS`` order) for this tick; ``states`` one per ``tick.gpus``.

    A GPU with no process of its own is ``no-job`` when others have theirs (a job on 4 of 8 GPUs
    leaves 4 paid for and unused); when NVML lists no process at all (containers hide them) the
    node's training processes count for every GPU."""
    out = [0.0] * N
    _assign(tick, states, lambda _i, _none: out)
    return out


def assign_jobs(tick: Tick, states: Sequence[GpuTime]) -> tuple[list[float], dict[str, list[float]]]:
    """:func:`assign`, and the same seconds by scheduler job: each GPU's seconds to the job on it
    (``tick.jobs``), ``NO_JOB`` where there is none, and wherever the GPU's seconds are booked as
    ``no-job`` (the ledger saw no process on it, whatever the scheduler said). The jobs' vectors add
    up to the total, bucket by bucket."""
    by_job: dict[str, list[float]] = {}
    jobs = tick.jobs

    def of(i: int, idle: bool) -> list[float]:
        key = jobs[i] if i < len(jobs) and not idle else NO_JOB
        v = by_job.get(key)
        if v is None:
            v = by_job[key] = [0.0] * N
        return v

    _assign(tick, states, of)
    total = [0.0] * N
    for v in by_job.values():
        for i, x in enumerate(v):
            total[i] += x
    return total, by_job


def _split(state: GpuTime) -> Split | None:
    """A tick's split; None where the GPU is down."""
    return _WHOLE[state] if isinstance(state, GpuState) else state


def _assign(tick: Tick, states: Sequence[GpuTime], vector: Callable[[int, bool], list[float]]) -> None:
    s = tick.seconds
    if s <= 0 or not tick.gpus:
        return
    per_gpu = any(g.busy for g in tick.gpus)
    job, checkpointing, startup, p = tick.job, tick.checkpointing, tick.startup, tick.pressures
    saving = min(1.0, max(0.0, tick.saving))
    evaluating = min(1.0 - saving, max(0.0, tick.evaluating))
    told = s * (saving + evaluating)
    for i, (g, state) in enumerate(zip(tick.gpus, states, strict=True)):
        unused = not (g.busy if per_gpu else job)
        out = vector(i, unused)
        if unused:
            out[_NO_JOB] += s
            continue
        if checkpointing:
            out[_CHECKPOINT] += s
            continue
        if told > 0.0:  # what the trainer said it did, whatever its GPUs did meanwhile
            out[_CHECKPOINT] += s * saving
            out[_EVALUATION] += s * evaluating
        _divide(s - told, state, startup, p, out)


def _divide(s: float, state: GpuTime, startup: bool, p: Pressures, out: list[float]) -> None:
    """One GPU's ``s`` seconds by its split: work, then the waits by their causes."""
    if s <= 0.0:
        return
    split = _split(state)
    if split is None:
        out[_STARTUP if startup else _IDLE] += s
        return
    working = min(1.0, max(0.0, split.working))
    out[_PRODUCTIVE] += s * working
    if startup:
        out[_STARTUP] += s * (1.0 - working)
        return
    # spinning and starved share what is not work, in their own proportion
    waits = max(0.0, split.spinning) + max(0.0, split.starved)
    rest = s * (1.0 - working)
    if waits <= 0.0:
        if rest > 0.0:
            _starved(p, out, rest)
        return
    spin = rest * max(0.0, split.spinning) / waits
    if spin > 0.0:
        _spinning(p, out, spin)
    if rest - spin > 0.0:
        _starved(p, out, rest - spin)


def started(states: Sequence[GpuTime]) -> bool:
    """A GPU did real work in this tick: a job starting up has started (``STARTUP_WORK``)."""
    for state in states:
        split = _split(state)
        if split is not None and split.working >= STARTUP_WORK:
            return True
    return False
