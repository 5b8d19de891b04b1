"""The classifier's steady evaluation in two checkouts, measured by turns: the cost ratio of one to
the other.

    git archive <commit> agent | tar -x -C /tmp/before
    .venv/bin/python bench/classifier_versions.py /tmp/before [NEW_TREE] [--rounds 300]

``classifier_cost.py`` run once per tree swings more between two runs on a shared VM than the
change it is asked about (one tree's median read 0.38 and 0.63 ms an hour apart). Here each tree's
``Engine`` lives in a worker process of its own (``PYTHONPATH`` = the tree), fed ``classifier_cost``'s
node stream, and the two take turns: a batch of evaluations in one, then in the other (the order
swapped every round). A slow spell of the machine then falls on both trees' batches of that round,
and the ratio is taken round by round. Reported per node: each tree's median batch (the mean CPU
time of the batch's fastest 90% of evaluations: ``time.thread_time`` of the ticks that evaluate)
and the median and quartiles of the paired ratios NEW / BEFORE.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BATCH = 40  # evaluations per turn: ~20 ms, shorter than a neighbour's slow spell
FASTEST = 0.9  # of a batch's evaluations: the rare one a page fault or a GC pass hits says little


def worker(node_index: int, evaluations: int) -> None:
    """One tree's engine over the bench's stream: answers each line ``N`` on stdin with the mean CPU
    seconds of the fastest ``FASTEST`` of the next N evaluations."""
    sys.path.insert(0, str(HERE))
    import classifier_cost as cost

    from agent.classifier.baselines import Baselines, learn
    from agent.classifier.engine import Engine
    from agent.classifier.samples import sample_from_snapshot
    from agent.config.classifier import ClassifierSection
    from agent.snapshot import NodeSnapshot

    node = cost.NODES[node_index]
    rnd = random.Random(7)
    cfg = ClassifierSection()
    every = max(1, round(cfg.evaluate_every))
    history = [cost.parts(node, float(t), rnd) for t in range(61)]

    def sample(t: float, prev: dict, cur: dict):
        snap = NodeSnapshot(
            seq=int(t), timestamp=1.7e9 + t, monotonic=t, rates=cost.tick_rates(prev, cur), parts=cur
        )
        return sample_from_snapshot(snap)

    window = [sample(float(t), history[t - 1], history[t]) for t in range(1, 61)]
    engine = Engine(cfg, learn(window, Baselines()))
    prev, samples = history[60], []
    for i in range(every * evaluations + 2 * every + 60):
        cur = cost.parts(node, 61.0 + i, rnd)
        samples.append(sample(61.0 + i, prev, cur))
        prev = cur
    for s in samples[:60]:
        engine.add(s)
    stream = iter(samples[60:])
    print("ready", flush=True)
    for line in sys.stdin:
        n = int(line)
        times: list[float] = []
        while len(times) < n:
            s = next(stream)
            t0 = time.thread_time()
            evaluated = engine.add(s)
            spent = time.thread_time() - t0
            if evaluated is not None:
                times.append(spent)
        kept = sorted(times)[: max(1, int(n * FASTEST))]
        print(sum(kept) / len(kept), flush=True)


def compare(trees: dict[str, str], node_index: int, rounds: int) -> dict[str, list[float]]:
    procs = {}
    for name, tree in trees.items():
        env = dict(os.environ, PYTHONPATH=tree)
        args = [sys.executable, __file__, "--worker", str(node_index), str(rounds * BATCH + BATCH)]
        procs[name] = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
    try:
        for p in procs.values():
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        out: dict[str, list[float]] = {name: [] for name in trees}
        names = list(trees)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                p = procs[name]
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write(f"{BATCH}\n")
                p.stdin.flush()
                out[name].append(float(p.stdout.readline()))
        return out
    finally:
        for p in procs.values():
            if p.stdin is not None:
                p.stdin.close()
            p.wait(30)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", help="the checkout to compare against (a tree holding agent/)")
    ap.add_argument("new", nargs="?", default=str(HERE.parent), help="default: this checkout")
    ap.add_argument("--rounds", type=int, default=300, help=f"turns of {BATCH} evaluations per tree")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from classifier_cost import NODES

    for i, node in enumerate(NODES):
        r = compare({"before": args.before, "new": args.new}, i, args.rounds)
        ratios = [b / a for a, b in zip(r["before"], r["new"], strict=True)]
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        print(node)
        before, new = (statistics.median(r[k]) * 1e3 for k in ("before", "new"))
        print(
            f"  before {before:.3f} ms, new {new:.3f} ms (median batches);"
            f" new/before round by round: median x{statistics.median(ratios):.3f}"
            f" (quartiles x{q1:.3f}-x{q3:.3f}, {args.rounds} rounds of {BATCH})"
        )


if __name__ == "__main__":
    main()
