"""Hugging Face Trainer with training-node-agent: checkpoint on request, stop, resume from it.

    python examples/hf_train.py --output-dir /mnt/cpfs/run42
    torchrun --nproc-per-node 2 examples/hf_train.py --output-dir /mnt/cpfs/run42   # CPU, gloo

Run it again with the same --output-dir and it resumes from the acked ``checkpoint-<step>``. The
model is a toy built in code (no hub download); the lines that matter are
``AgentCheckpointCallback()`` and ``resume_from_checkpoint=``. Agent config: ``signal = "SIGUSR1"``;
for ``--jit`` (transformers' JIT checkpoint on SIGTERM) ``signal = "SIGTERM"``.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from tna_client.hf import AgentCheckpointCallback, has_checkpoint
from transformers import Trainer, TrainerCallback, TrainingArguments


class Toy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def forward(self, x, labels=None):
        out = self.net(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


class Data(torch.utils.data.Dataset):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(256, 8, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.x[i].sum(0, keepdim=True)}


class Pace(TrainerCallback):
    """Slows the toy down and says where it started (the resume test reads it)."""

    def __init__(self, step_seconds: float) -> None:
        self.step_seconds = step_seconds
        self.first: int | None = None

    def on_step_begin(self, args, state, control, **kw):
        if self.first is None:
            self.first = state.global_step
            print(f"rank {args.process_index}: first step at global_step {self.first}", flush=True)
        time.sleep(self.step_seconds)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--output-dir", required=True, help="shared storage that outlives the instance")
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--step-seconds", type=float, default=0.0)
    p.add_argument("--save-every", type=int, default=0, help="routine checkpoints every N steps (0: off)")
    p.add_argument("--jit", action="store_true", help="transformers' JIT checkpoint on SIGTERM")
    p.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (0: never)")
    args = p.parse_args()
    targs = TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=8,
        # each routine save is reported to the agent, which counts the work a reclaim would lose
        save_strategy="steps" if args.save_every else "no",
        save_steps=args.save_every or 500,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        logging_strategy="no",
        enable_jit_checkpoint=args.jit,
        # each evaluation is told to the agent as a pause of its own, not as the GPUs starving
        eval_strategy="steps" if args.eval_every else "no",
        eval_steps=args.eval_every or None,
        per_device_eval_batch_size=8,
    )
    agent = AgentCheckpointCallback(signal=None if args.jit else "")  # JIT: the Trainer owns SIGTERM
    trainer = Trainer(
        model=Toy(),
        args=targs,
        train_dataset=Data(),
        eval_dataset=Data() if args.eval_every else None,
        callbacks=[agent, Pace(args.step_seconds)],
    )
    resume = has_checkpoint(args.output_dir)  # None the first time: start from scratch
    print(f"rank {targs.process_index}: training, pid {os.getpid()}, resume from {resume}", flush=True)
    trainer.train(resume_from_checkpoint=resume)
    if agent.last_path:
        print(f"rank {targs.process_index}: stopped at {agent.last_path}, acked {agent.acked}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
