"""A plain PyTorch training loop that checkpoints when training-node-agent asks, on one process or
under torchrun (any number of ranks, CPU/gloo or GPU/NCCL).

    torchrun --nproc-per-node 8 examples/pytorch_loop.py --checkpoint-dir /mnt/cpfs/run42

The agent's config for it ([trainer] in agent.toml):

    discover = ["nvml"]          # the GPU processes: torchrun's workers, never the torchrun agent
    signal = "SIGUSR1"

What makes it safe (tna_client.torch_dist.DistributedCheckpoint does it):

* every rank builds a PreemptionGuard (SIGUSR1 handler + the request file, found by itself);
* every step all ranks agree on the flag with one all-reduce (MAX): a notice reaches only the
  preempted node, but every node must stop at the same step or the next collective hangs;
* rank 0 writes the checkpoint to shared storage (NAS/CPFS/OSS), atomically; the other ranks wait at
  a barrier; rank 0 flushes it to disk and only then acks. Run it again to resume from it.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from tna_client.torch_dist import DistributedCheckpoint, latest


def build():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    return model, opt


def save(directory: str, step: int, model, opt) -> str:
    """Atomic: a half-written file must never be the newest checkpoint."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"step-{step:08d}.pt")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint-dir", required=True, help="shared storage that survives the instance")
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--step-seconds", type=float, default=0.0, help="slow the toy down (tests)")
    p.add_argument("--keep-going", action="store_true", help="continue after the checkpoint (drills)")
    args = p.parse_args()

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    ckpt = DistributedCheckpoint()  # signal from $TNA_CHECKPOINT_SIGNAL, default SIGUSR1

    model, opt = build()
    if dist.is_initialized():
        model = torch.nn.parallel.DistributedDataParallel(model)
    start = 0
    if (resume := latest(args.checkpoint_dir)) is not None:
        state = torch.load(resume, weights_only=True)
        (model.module if dist.is_initialized() else model).load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
        print(f"rank {rank}: resumed from {resume} at step {start}", flush=True)
    print(f"rank {rank}: training, pid {os.getpid()}", flush=True)

    for step in range(start + 1, args.steps + 1):
        x = torch.randn(64, 16)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ckpt.guard.step()  # a step boundary for the agent's step figures (a clock read)
        if args.step_seconds:
            time.sleep(args.step_seconds)
        if not ckpt.requested():
            continue
        left = ckpt.guard.seconds_remaining()
        print(f"rank {rank}: checkpoint requested at step {step} ({left and round(left)} s left)", flush=True)
        net = model.module if dist.is_initialized() else model
        path = ckpt.checkpoint(step, lambda: save(args.checkpoint_dir, step, net, opt))  # noqa: B023
        if path:
            print(f"rank 0: saved {path}, acked {ckpt.acked}", flush=True)
        if not args.keep_going:
            break
    ckpt.close()
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
