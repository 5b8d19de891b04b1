"""The slow GPU inside a node (pure): in a synchronous job every rank waits for the slowest at each
collective, so one GPU that runs slow (throttled, trained down, under a low power limit) works
while its peers spin-wait for it. The node then reads ``compute`` (the slow GPU works) or
``sync-wait`` (its peers wait), and neither names the GPU; this does.

A GPU is named where, over the window, its peers (the node's other GPUs, by their median) spin at
least ``PEER_SPIN`` of the time, it works at least ``LEAD`` more of the time than they do, and it
spins at most half as much as they do. Where most of the node's GPUs would be named, none is: that
is not one slow GPU but GPUs out of step (per-GPU phases, different jobs). The evidence is the
clocks event reasons the GPU ran under, by the share of its samples, and its SM clock against its
max in the window's last sample.

Each GPU needs ``MIN_SAMPLES`` in the window: over a dozen samples, GPUs whose phases are merely out
of step with each other put one GPU that far ahead by chance several times a minute. The node's
GPUs are taken as one job's (a training node runs one job): beside a job that waits, a second job's
compute-bound GPUs would read as slow ones.
"""

from __future__ import annotations

from statistics import median
from typing import NamedTuple

from agent.classifier.health import throttle_shares
from agent.classifier.samples import Sample
from agent.classifier.tallies import UNIT, GpuWindow

PEER_SPIN = 0.2  # a collective's busy-wait this long is the peers waiting, not a barrier's blip
LEAD = 0.2  # the GPU works this much more of the time than its peers' median
MIN_SAMPLES = 20


class SlowGpu(NamedTuple):
    gpu: int  # NVML index (a NamedTuple field cannot be called index)
    working: float  # its share of the window doing real work
    peers: int
    peers_working: float  # its peers' median working share
    peers_spinning: float  # their median spinning share: how long they wait for it
    under: tuple[tuple[str, float], ...]  # (clocks event reason, share of its samples), largest first
    clock: float | None = None  # its SM clock in the window's last sample, Hz
    clock_max: float | None = None


def slow_gpus(g: GpuWindow, last: Sample) -> tuple[SlowGpu, ...]:
    shares = {
        i: (1.0 - g.not_working_at.get(i, 0) / (n * UNIT), g.spinning_at.get(i, 0) / (n * UNIT))
        for i, n in g.seen_at.items()
        if n >= MIN_SAMPLES
    }
    if len(shares) < 2:
        return ()
    out = []
    for i, (working, spinning) in shares.items():
        peers = [v for j, v in shares.items() if j != i]
        peers_working = median(w for w, _ in peers)
        peers_spinning = median(s for _, s in peers)
        if peers_spinning >= PEER_SPIN and working - peers_working >= LEAD and spinning * 2 <= peers_spinning:
            under = throttle_shares(g.throttled, i, g.seen_at[i])
            now = next((x for x in last.gpus if x.nvml_index == i), None)
            clock, top = (now.clock, now.clock_max) if now is not None else (None, None)
            out.append(SlowGpu(i, working, len(peers), peers_working, peers_spinning, under, clock, top))
    return tuple(out) if len(out) * 2 < len(shares) else ()
