"""Cost of one classifier evaluation, next to the sampler's own per-tick rate computation for the
same node, measured in the same run.

    .venv/bin/python bench/classifier_cost.py            # 2000 evaluations per node
    .venv/bin/python bench/classifier_cost.py --quick    # 200

Two nodes: the telemetry benchmark's large one (8 GPUs, 16 disks, 20 NFS mounts, 8 NICs, 4 RDMA
ports) and a typical HGX node (8 GPUs, 2 disks, 1 NFS mount, 2 NICs, 8 RDMA ports); every series
active in every sample, a full default window of 60 one-second samples.

- *In the daemon*: an ``Engine`` fed a stream of samples, timed on the ticks that evaluate (every
  5 s, the default ``evaluate_every``): classify with its memo (each sample's GPU tally made and
  counted into the window's GPU counts as it arrives, running sums per device) and, once per window
  length, learning a part of the baselines (the idle powers in the evaluation; the peaks and RTTs
  on the tick after it, which is timed on its own, and added to its evaluation's).
- *From scratch*: ``classify`` on the window with nothing memoized, plus ``learn``.
- *Peer*: each source's rates over all five parts for one tick of the same node (the sampler's work
  that turns counters into the rates the classifier reads).

Goal: <= 1 ms per evaluation. Times are CPU time of the measuring thread (``time.thread_time``), so
other load on the box counts less (not nothing: a shared core's caches and frequency still do); the
steady evaluation is also given in wall-clock time, and split out: the evaluations that also learn a
part of the baselines (the tail), and the cost of the ticks in between, which only ingest.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass

from agent.classifier.baselines import Baselines, learn
from agent.classifier.engine import Engine
from agent.classifier.samples import sample_from_snapshot
from agent.classifier.verdict import classify
from agent.config.classifier import ClassifierSection
from agent.snapshot import NodeSnapshot
from agent.snapshot.rates import NodeRates
from agent.sources import registry
from agent.sources.gpu.part import GpuPart, GpuProcess, GpuStats
from agent.sources.host.part import CpuTimes, HostPart, Pressure
from agent.sources.network.part import NetworkPart, NicStat, RdmaPort
from agent.sources.processes.part import ProcessPart, ProcessStat
from agent.sources.storage.part import DiskStat, NfsMount, StoragePart


@dataclass(frozen=True)
class Node:
    name: str
    gpus: int
    disks: int
    nfs: int
    nics: int
    ports: int

    def __str__(self) -> str:
        return (
            f"{self.name}: {self.gpus} GPUs, {self.disks} disks, {self.nfs} NFS mounts, "
            f"{self.nics} NICs, {self.ports} RDMA ports"
        )


NODES = (Node("large", 8, 16, 20, 8, 4), Node("HGX", 8, 2, 1, 2, 8))


def parts(node: Node, t: float, rnd: random.Random) -> dict[str, object]:
    """Cumulative counters of the node at time ``t`` (rates of a few hundred MB/s, jittered)."""

    def c(rate: float) -> int:
        return int((t + 0.05 * rnd.random()) * rate)  # jittered, never backwards

    phase = int(t) % 3
    util, power, sm = [(0.97, 330.0, 0.8), (1.0, 85.0, 0.04), (0.0, 62.0, 0.0)][phase]
    gpu = GpuPart(
        "550.54",
        "12.550",
        tuple(
            GpuStats(
                index=i,
                uuid=f"GPU-{i}",
                model="NVIDIA H800",
                up=True,
                utilization=util,
                power_watts=power,
                power_limit_watts=700.0,
                sm_active=sm,
                tensor_active=sm / 2,
                clocks_event_reasons=0x4 if phase == 0 else 0,
                pcie_tx_bytes=c(1e9),
                pcie_rx_bytes=c(2e9),
                nvlink_tx_bytes=c(5e9),
                nvlink_rx_bytes=c(5e9),
                processes=(GpuProcess(1000 + i, 1 << 34),),
            )
            for i in range(node.gpus)
        ),
    )
    storage = StoragePart(
        tuple(
            DiskStat(f"nvme{i}n1", c(1e4), 0, c(2e8) // 512, t * 0.5, 0, 0, 0.0, 1, t * 0.6)
            for i in range(node.disks)
        ),
        tuple(
            NfsMount(f"/mnt/d{i}", f"nas{i}:/data", "tcp", "nfs4", c(3e8), c(3e8), c(300), t * 1.2, t * 1.3)
            for i in range(node.nfs)
        ),
    )
    network = NetworkPart(
        tuple(
            NicStat(f"eth{i}", c(1e9), c(1e9), c(1e6), c(1e6), 0, 0, 0, 0, 3_125_000_000)
            for i in range(node.nics)
        ),
        tuple(
            RdmaPort(f"mlx5_{i}", 1, c(2e10), c(2e10), 50_000_000_000, c(1e5), c(200), c(100), 0)
            for i in range(node.ports)
        ),
    )
    host = HostPart(
        CpuTimes(t * 50, 0, t * 10, t * 30, t * 5, 0, 0, 0),
        96,
        30.0,
        30.0,
        30.0,
        1 << 40,
        1 << 39,
        pressure={"io": Pressure(1, 1, 1, t * 0.2, 1, 1, 1, t * 0.1)},
    )
    procs = ProcessPart(
        tuple(
            ProcessStat(1000 + i, 5000, "python", t * 6.0, c(1e8), c(1e8), 12.0, 40, 8)
            for i in range(node.gpus)
        )
    )
    return {"host": host, "gpu": gpu, "storage": storage, "network": network, "processes": procs}


def tick_rates(prev: dict[str, object], cur: dict[str, object]) -> NodeRates:
    by_source = {}
    for name in cur:
        fn = registry.source(name).rates
        if fn is not None:
            by_source[name] = fn(prev[name], cur[name], 1.0)
    return NodeRates(1.0, by_source)


def bench(node: Node, n: int) -> dict[str, list[float]]:
    rnd = random.Random(7)
    cfg = ClassifierSection()
    history = [parts(node, float(t), rnd) for t in range(61)]
    window = []
    for t in range(1, 61):
        snap = NodeSnapshot(
            seq=t,
            timestamp=1.7e9 + t,
            monotonic=float(t),
            rates=tick_rates(history[t - 1], history[t]),
            parts=history[t],
        )
        window.append(sample_from_snapshot(snap))
    baselines = learn(window, Baselines())

    def cold() -> None:  # everything from scratch, learning included
        classify(window, baselines, cfg, "compute")
        learn(window, baselines)

    # the daemon's steady state: an Engine over a stream of samples, evaluating every 5 s (each
    # sample's GPUs tallied as it arrives, running sums subtracted; learning runs once per window
    # length)
    engine = Engine(cfg, baselines)
    prev = history[60]
    samples = []
    for i in range(10 * (n + 10) + 2):
        t = 61.0 + i
        cur = parts(node, t, rnd)
        snap = NodeSnapshot(
            seq=int(t), timestamp=1.7e9 + t, monotonic=t, rates=tick_rates(prev, cur), parts=cur
        )
        samples.append(sample_from_snapshot(snap))  # ingest is per tick: timed on its own below
        prev = cur
    for s in samples[:60]:
        engine.add(s)
    steady: list[float] = []
    wall: list[float] = []
    learning: list[float] = []  # the evaluations that also learned a part of the baselines
    between: list[float] = []  # the ticks that only ingest
    after: list[float] = []  # those that learn what the evaluation before left them
    together: list[float] = []  # such an evaluation and the tick after it, added up
    for s in samples[60:]:
        learned = len(engine.learned_at), max(engine.learned_at.values(), default=0.0)
        pending = engine.learning_pending
        w0, t0 = time.perf_counter(), time.thread_time()
        ev = engine.add(s)
        cpu, elapsed = time.thread_time() - t0, time.perf_counter() - w0
        if ev is None:
            between.append(cpu)
            if pending:
                after.append(cpu)
                together.append(learning[-1] + cpu)
            continue
        steady.append(cpu)
        wall.append(elapsed)
        if (len(engine.learned_at), max(engine.learned_at.values(), default=0.0)) != learned:
            learning.append(cpu)
    for _ in range(20):  # warm caches
        cold()
    prev, cur = history[59], history[60]
    snap = NodeSnapshot(seq=60, timestamp=0, monotonic=60.0, rates=tick_rates(prev, cur), parts=cur)
    return {
        "steady": steady,
        "wall": wall,
        "learning": learning,
        "between": between,
        "after": after,
        "together": together,
        "cold": timed(cold, n),
        "classify": timed(lambda: classify(window, baselines, cfg, "compute"), n),
        "ingest": timed(lambda: sample_from_snapshot(snap), n),
        "peer": timed(lambda: tick_rates(prev, cur), n),
    }


def timed(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.thread_time()
        fn()
        out.append(time.thread_time() - t0)
    return out


def fmt(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"median {statistics.median(xs) * 1e3:.3f} ms  p99 {xs[int(len(xs) * 0.99) - 1] * 1e3:.3f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="200 evaluations instead of 2000")
    args = ap.parse_args()
    n = 200 if args.quick else 2000
    worst = 0.0
    for node in NODES:
        r = bench(node, n)
        med_steady, med_peer = statistics.median(r["steady"]), statistics.median(r["peer"])
        worst = max(worst, med_steady)
        print(node)
        print(f"  evaluation in the daemon (steady state)   {fmt(r['steady'])}   ({len(r['steady'])} runs)")
        print(f"    the same, wall clock                    {fmt(r['wall'])}")
        n_learn = len(r["learning"])
        print(f"    those that also learn baselines         {fmt(r['learning'])}   ({n_learn} runs)")
        print(f"    a tick that only ingests (engine.add)   {fmt(r['between'])}")
        print(f"      one after a learning evaluation       {fmt(r['after'])}   (it learns the peaks/RTTs)")
        print(f"      that evaluation and this tick, summed {fmt(r['together'])}")
        print(f"  evaluation from scratch (classify+learn)  {fmt(r['cold'])}")
        print(f"    classify alone, from scratch            {fmt(r['classify'])}")
        print(f"  ingest one snapshot (every tick)          {fmt(r['ingest'])}")
        print(f"  peer: the sampler's rates for one tick    {fmt(r['peer'])}")
        print(f"  ratio steady evaluation / peer tick       {med_steady / med_peer:.2f}x")
        print(f"  ratio from-scratch evaluation / peer tick {statistics.median(r['cold']) / med_peer:.2f}x")
    ok = "OK" if worst <= 1e-3 else "OVER"
    print(f"budget 1 ms per evaluation (CPU time): {ok}, worst median {worst * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
