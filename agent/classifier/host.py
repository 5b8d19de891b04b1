"""What the training process itself does while its GPUs wait (pure): the host-side shapes' evidence.

Three ways a GPU waits on its own host rather than on its input or a peer, each told from outside:

- *a collective to wait in*: spinning (a kernel resident, little real work) needs one. A single
  process launched with no rank count (``WORLD_SIZE`` unset or 1, nothing else on the node) has no
  peer to wait for, so its spin is small kernels the host cannot launch fast enough;
- *saves*: runs of starved samples during which the training process wrote at least ``SAVE_BYTES``
  (``torch.save`` to a slow volume, its fsync). Counted as episodes, so the reasons can say how long
  each blocks and how often; a save every 10-20 s recurs several times in the default 60 s window;
- *host-to-device copies*: PCIe bytes the GPUs received per second of their starvation. A batch
  copied from pinned memory takes milliseconds of a step; a copy from pageable memory is staged by
  the driver through a pinned buffer and holds the GPUs for as long as the CPU copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from itertools import pairwise
from operator import attrgetter, is_not, mul, sub
from typing import NamedTuple

from agent.classifier.samples import Sample
from agent.classifier.tallies import GpuTally

SAVE_BYTES = 8e6  # written during one stall for it to count as a save, not a log line
STARVED_RUN = 0.5  # a sample in a stall: its GPUs starved at least this share of it


class HostFeatures(NamedTuple):
    collective: bool | None = None  # None: the trainers' environment could not be read
    world_size: int | None = None
    ranks: int = 0
    stalls: int = 0  # save stalls in the window (one going on at its start included)
    saves: int = 0  # save stalls that began inside the window
    save_seconds: float = 0.0  # mean time one save held the GPUs (its starved samples' time)
    save_period: float | None = None  # mean time from one save's start to the next's
    save_share: float = 0.0  # of the window's GPU time, starved inside saves
    save_bytes: float = 0.0  # mean bytes one save wrote
    write_starved: float | None = None  # bytes/s the trainers wrote while the GPUs starved
    pcie_starved: float | None = None  # bytes/s per GPU over PCIe into the GPUs while they starved
    pcie_working: float | None = None  # ... while they worked
    from_trainer: bool = False  # the saves are the trainer's own word (tna_client), not told from outside
    eval_share: float = 0.0  # of the window, inside the trainer's evaluation loop (tna_client)
    evals: int = 0  # evaluations that began inside the window
    eval_seconds: float = 0.0  # mean seconds one evaluation held the training
    eval_period: float | None = None
    data_share: float | None = None  # of the window, the trainer waiting for its next batch (tna_client)


def measure_host(
    window: Sequence[Sample], tallies: Sequence[GpuTally], starves: Sequence[float], works: Sequence[float]
) -> HostFeatures:
    """``starves``/``works``: each tally's starved and working share (the traffic rule's lists)."""
    if not window:
        return HostFeatures()
    outside = _measure_outside(window, tallies, starves, works)
    if window[-1].told is None:
        return outside
    return _with_told(outside, window)


def _episodes(window: Sequence[Sample], share: list[float]) -> tuple[float, int, float, float | None]:
    """The window's share inside runs of samples with a share of a span, the runs that began in it,
    the mean seconds of a run (those going on at the window's start included) and their period."""
    times = list(map(_T, window))
    runs: list[list[float]] = []  # [start, seconds, begun inside the window]
    total = 0.0
    for i in range(1, len(window)):
        dt = times[i] - times[i - 1]
        x = share[i] * dt
        total += x
        if share[i] > 0:
            if share[i - 1] > 0 and runs:
                runs[-1][1] += x
            else:
                runs.append([times[i] - x, x, float(i > 1 or share[0] == 0)])
    span = times[-1] - times[0]
    begun = [r for r in runs if r[2]]
    period = (begun[-1][0] - begun[0][0]) / (len(begun) - 1) if len(begun) >= 2 else None
    # a run cut by the window's edges is shorter than it was: the whole ones say how long one lasts
    whole = [r for r in begun if r is not runs[-1] or share[-1] == 0] or runs
    mean = sum(r[1] for r in whole) / len(whole) if whole else 0.0
    return (min(1.0, total / span) if span > 0 else 0.0), len(begun), mean, period


def _with_told(h: HostFeatures, window: Sequence[Sample]) -> HostFeatures:
    told = [s.told for s in window]
    saving = [t.saving if t is not None else 0.0 for t in told]
    evaluating = [t.evaluating if t is not None else 0.0 for t in told]
    save_share, saves, save_seconds, save_period = _episodes(window, saving)
    eval_share, evals, eval_seconds, eval_period = _episodes(window, evaluating)
    stalls = sum(1 for a, b in pairwise(saving) if b > 0 and not a > 0) + (saving[0] > 0)
    marks = [(t.data_seconds, t.data_at) for t in told if t is not None and t.data_at is not None]
    data_share = None
    if len(marks) >= 2 and marks[-1][1] - marks[0][1] >= 5.0:  # two step reports at least
        (s0, t0), (s1, t1) = marks[0], marks[-1]
        data_share = min(1.0, max(0.0, ((s1 or 0.0) - (s0 or 0.0)) / (t1 - t0)))
    return h._replace(
        from_trainer=True,
        stalls=stalls,
        saves=saves,
        save_seconds=save_seconds,
        save_period=save_period,
        save_share=save_share,
        save_bytes=h.save_bytes if h.stalls else 0.0,
        eval_share=eval_share,
        evals=evals,
        eval_seconds=eval_seconds,
        eval_period=eval_period,
        data_share=data_share,
    )


def _measure_outside(
    window: Sequence[Sample], tallies: Sequence[GpuTally], starves: Sequence[float], works: Sequence[float]
) -> HostFeatures:
    last = window[-1].trainers
    ranks = last.ranks if last is not None else 0
    world = last.world_size if last is not None else None
    collective: bool | None
    if ranks > 1 or (world is not None and world > 1):
        collective = True
    elif world is None:
        collective = None
    else:
        collective = False
    # column passes: an evaluation reads 60 samples of a large node every 5 s (bench/classifier_cost.py)
    wrote = [t.write if t is not None else None for t in map(_TRAINERS, window)]
    write_seen = any(map(_NOT_NONE, wrote))
    writes = [w or 0.0 for w in wrote] if write_seen else []
    pcies = list(map(_PCIE, window))
    pcie_seen = any(map(_NOT_NONE, pcies))
    if not (pcie_seen or any(writes)):  # nothing written, no copies counted: only the collective to say
        return HostFeatures(
            collective=collective, world_size=world, ranks=ranks, write_starved=0.0 if write_seen else None
        )
    starved_sum = sum(starves)
    pcie_starved = pcie_working = None
    if pcie_seen and starved_sum:
        rx = [p or 0.0 for p in pcies]
        pcie_starved = sum(map(mul, starves, rx)) / starved_sum
        work_sum = sum(works)
        pcie_working = sum(map(mul, works, rx)) / work_sum if work_sum else None
    if not any(writes):  # nothing written: no save to look for
        return HostFeatures(
            collective=collective,
            world_size=world,
            ranks=ranks,
            write_starved=0.0 if write_seen else None,
            pcie_starved=pcie_starved,
            pcie_working=pcie_working,
        )
    times = list(map(_T, window))
    dts = [0.0, *map(sub, times[1:], times[:-1])]
    stalls: list[list[float]] = []
    if sum(map(mul, writes, dts)) >= SAVE_BYTES:  # no save can be in a window that wrote less
        stalls = _stalls(times, dts, starves, writes, [g.n for g in tallies])
    saves = [r for r in stalls if r[2] >= SAVE_BYTES]
    # a stall still going on at the window's start began before it: its time counts, not as a save begun
    begun = [r for r in saves if r[0] > window[0].t]
    span = window[-1].t - window[0].t
    period = None
    if len(begun) >= 2:
        period = (begun[-1][0] - begun[0][0]) / (len(begun) - 1)
    return HostFeatures(
        collective=collective,
        world_size=world,
        ranks=ranks,
        stalls=len(saves),
        saves=len(begun),
        save_seconds=sum(r[1] for r in saves) / len(saves) if saves else 0.0,
        save_period=period,
        save_share=min(1.0, sum(r[1] for r in saves) / span) if saves and span > 0 else 0.0,
        save_bytes=sum(r[2] for r in saves) / len(saves) if saves else 0.0,
        write_starved=sum(map(mul, starves, writes)) / starved_sum if write_seen and starved_sum else None,
        pcie_starved=pcie_starved,
        pcie_working=pcie_working,
    )


def _stalls(
    times: list[float], dts: list[float], starves: Sequence[float], writes: list[float], gpus: list[int]
) -> list[list[float]]:
    """[start time, starved seconds, bytes written] of each run of samples starved at least
    ``STARVED_RUN``, with the starved parts of the samples either side of it (a save rarely starts
    or ends on a tick)."""
    runs: list[list[float]] = []
    in_run = False
    edge = 0.0
    for i, (t, dt, starve, wrote, n) in enumerate(zip(times, dts, starves, writes, gpus, strict=True)):
        if not n:
            in_run, edge = False, 0.0
            continue
        if i and starve >= STARVED_RUN:
            if not in_run:
                runs.append([t - dt, edge, 0.0])
                in_run = True
            r = runs[-1]
            r[1] += starve * dt
            r[2] += wrote * dt
        else:
            if in_run:
                runs[-1][1] += starve * dt
                runs[-1][2] += wrote * dt
            in_run = False
            edge = starve * dt
    return runs


_TRAINERS = attrgetter("trainers")
_PCIE = attrgetter("pcie_rx")
_T = attrgetter("t")
_NOT_NONE = partial(is_not, None)
