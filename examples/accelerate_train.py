"""accelerate with training-node-agent: checkpoint on request (``save_state`` on every rank), stop,
resume from it.

    accelerate launch --cpu --num_processes 2 examples/accelerate_train.py --checkpoint-dir /mnt/cpfs/run42
    torchrun --nproc-per-node 2 examples/accelerate_train.py --checkpoint-dir /mnt/cpfs/run42

Run it again with the same --checkpoint-dir and it resumes from the acked ``step-<N>`` directory.
The model is a toy built in code. Agent config: ``signal = "SIGUSR1"``.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from accelerate import Accelerator
from tna_client.torch_dist import DistributedCheckpoint, latest


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint-dir", required=True, help="shared storage that outlives the instance")
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--step-seconds", type=float, default=0.0)
    args = p.parse_args()
    acc = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt = acc.prepare(model, opt)
    ckpt = DistributedCheckpoint()  # after the Accelerator: the process group exists, the rank is known
    step = 0
    resume = latest(args.checkpoint_dir)
    if resume is not None:
        acc.load_state(resume)
        with open(os.path.join(resume, "step")) as f:
            step = int(f.read())
    rank = acc.process_index
    print(f"rank {rank}: training, pid {os.getpid()}, resume from {resume}", flush=True)
    print(f"rank {rank}: first step at global_step {step}", flush=True)

    def save() -> str:
        path = os.path.join(args.checkpoint_dir, f"step-{step:08d}")
        acc.save_state(path)  # collective: every rank writes its part (its RNG state at least)
        if acc.is_main_process:
            with open(os.path.join(path, "step"), "w") as f:
                f.write(str(step))
        return path

    while step < args.max_steps:
        x = torch.randn(8, 8)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad()
        acc.backward(loss)
        opt.step()
        step += 1
        time.sleep(args.step_seconds)
        if ckpt.requested():
            path = ckpt.checkpoint(step, save, all_ranks=True)
            if acc.is_main_process:
                print(f"rank {rank}: stopped at {path}, acked {ckpt.acked}", flush=True)
            break
    ckpt.close()
    # no rank tears the process group down while another still uses it: a rank that exits first
    # left gloo's threads of the other to abort it in teardown (SIGABRT, "terminate called")
    acc.wait_for_everyone()
    acc.end_training()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
