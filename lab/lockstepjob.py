"""One rank of a synchronous job on one fake GPU of the node: compute, then all-reduce, in lockstep
with every other rank, as data-parallel training runs on an 8-GPU board.

    torchrun --standalone --nproc-per-node 8 lab/lockstepjob.py --phases DIR --seconds N \\
        --gpu-seconds 0.06 --slow-rank 3 --slow-factor 1.6 --slow-after 20 --seed 7

Each step the rank shows ``compute`` for ``--gpu-seconds`` (the GPU's kernels: the fake GPUs stand
for them, so the rank sleeps), jittered by a few percent, and ``--slow-factor`` times as long on
``--slow-rank`` (its GPU throttled), then ``spin`` while it waits in a real gloo all-reduce for the
slowest rank. The slow rank turns slow ``--slow-after`` seconds into the job (0: from the start), so
one job shows a healthy board, then the throttled GPU. The phase goes to ``DIR/<rank>`` ("<phase>
<pid>", with " slow" once the rank is), which lab/lockstep.py paints onto that rank's fake GPU. The
job ends after ``--seconds`` (the stop rides on the all-reduce).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import torch
import torch.distributed as tdist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agent.core.statefile import write_atomic

JITTER = 0.05  # each step's compute varies this much: kernels are not metronomes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phases", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--gpu-seconds", type=float, default=0.06)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-factor", type=float, default=1.0)
    ap.add_argument("--slow-after", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    tdist.init_process_group("gloo")
    rank = tdist.get_rank()
    rng = random.Random(args.seed * 1000 + rank)
    phase_file = Path(args.phases) / str(rank)
    pid = os.getpid()

    slow = False

    def show(phase: str) -> None:
        write_atomic(phase_file, f"{phase} {pid}{' slow' if slow else ''}".encode(), durable=False)

    flag = torch.zeros(1)
    start = time.monotonic()
    end = start + args.seconds
    while True:
        slow = rank == args.slow_rank and time.monotonic() - start >= args.slow_after
        factor = args.slow_factor if slow else 1.0
        show("compute")
        time.sleep(args.gpu_seconds * factor * rng.uniform(1 - JITTER, 1 + JITTER))
        show("spin")
        flag[0] = 1.0 if rank == 0 and time.monotonic() >= end else 0.0
        tdist.all_reduce(flag)  # every rank waits here for the slowest
        if flag[0] > 0:
            break
    show("idle")
    tdist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
