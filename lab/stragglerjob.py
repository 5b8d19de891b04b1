"""One rank of a data-parallel job for the straggler test: read a batch, compute, all-reduce, step.

    torchrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint HOST:PORT --rdzv-id llama ... \\
        lab/stragglerjob.py --data /dev/loopN --gpu-state S --stop-file F

Each step reads ``--read-bytes`` with O_DIRECT from ``--data`` (every byte crosses the node's cgroup
read throttle), computes for ``--gpu-seconds``, all-reduces ``--elems`` float32 over gloo and calls
``guard.step()`` (tna_client), so the node's agent gets its step figures. The fake GPUs of the rank's
node show its phase (starved, compute, spin), as lab/torchjob.py does. The job ends when rank 0 sees
``--stop-file`` (the stop rides on the all-reduce, so every rank makes the same calls) or after
``--seconds``.

``--degrade-file``: while that file exists ({"gpu": k, "cause": c, "factor": f}), GPU k of the node
runs ``f`` times slow under clocks event reason ``c`` (lab/lockstep.py's causes): the node's other GPUs
finish their compute and spin while it works on, as the node's ranks would wait for it in their
intra-node all-reduce, and only then does the node join the all-reduce across nodes. The ranks of one
node are one process here: the real eight-rank lockstep is lab/lockstepjob.py's; this job's real
collective is the one across nodes, which the slow GPU delays.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as tdist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "client"))
from tna_client import PreemptionGuard

from lab.blockdev import DirectReader
from lab.gpu import LabGpus
from lab.lockstep import slow_fields


def degraded(path: str) -> tuple[int, float, dict[int, dict]] | None:
    """(slow GPU, factor, its fields) while ``path`` exists."""
    try:
        d = json.loads(Path(path).read_text())
        return int(d["gpu"]), float(d["factor"]), {int(d["gpu"]): slow_fields(d["cause"], float(d["factor"]))}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--data-size", type=int, default=64 << 20)
    ap.add_argument("--read-bytes", type=int, default=1 << 20)
    ap.add_argument("--gpu-state", required=True)
    ap.add_argument("--gpu-seconds", type=float, default=0.05)
    ap.add_argument("--elems", type=int, default=4096)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--degrade-file", default="")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tdist.init_process_group("gloo")
    rank = tdist.get_rank()
    gpus = LabGpus(Path(args.gpu_state), gpus=args.gpus, gpm="all")
    reader = DirectReader(Path(args.data), args.data_size, args.read_bytes)
    guard = PreemptionGuard(signal=None)
    bucket = torch.zeros(args.elems)
    pid = os.getpid()
    end = time.monotonic() + args.seconds
    try:
        while True:
            slow = degraded(args.degrade_file) if args.degrade_file else None
            extra = slow[2] if slow else None
            gpus.phase("starved", pid, extra)
            reader.read()
            gpus.phase("compute", pid, extra)
            time.sleep(args.gpu_seconds)
            if slow:
                k, factor, _ = slow
                gpus.paint(
                    ["compute" if i == k else "spin" for i in range(args.gpus)], [pid] * args.gpus, extra
                )
                time.sleep(args.gpu_seconds * (factor - 1))
            gpus.phase("spin", pid, extra)
            bucket.fill_(0.0)
            done = rank == 0 and (os.path.exists(args.stop_file) or time.monotonic() >= end)
            bucket[-1] = 1.0 if done else 0.0
            tdist.all_reduce(bucket)
            guard.step()
            if bucket[-1].item() > 0:
                break
        tdist.barrier()  # both ranks past their last collective before either tears down
    finally:
        gpus.phase("idle", None)
        reader.close()
        guard.uninstall()
        tdist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
