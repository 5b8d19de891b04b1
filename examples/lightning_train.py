"""PyTorch Lightning with training-node-agent: checkpoint on request, stop, resume from it.

    python examples/lightning_train.py --checkpoint-dir /mnt/cpfs/run42            # one process
    python examples/lightning_train.py --checkpoint-dir /mnt/cpfs/run42 --devices 2   # DDP on CPU
    python examples/lightning_train.py --checkpoint-dir /tmp/run --val-every 20 --val-batches 8

With ``--val-every N`` it validates every N steps; ``AgentCheckpoint`` tells the agent each
validation as it runs, and the agent books it as ``evaluation`` (``--val-log`` writes the job's own
record of its validations, one JSON line each, to check the agent against).

Run it again with the same --checkpoint-dir and it resumes from the acked checkpoint. The model is a
toy built in code; the two lines that matter are ``AgentCheckpoint`` and ``ckpt_path=``.
Agent config: ``signal = "SIGUSR1"``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import lightning.pytorch as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from tna_client.lightning import AgentCheckpoint, latest_checkpoint


class Toy(L.LightningModule):
    def __init__(
        self, step_seconds: float, val_batches: int = 0, val_seconds: float = 0.0, val_log: str = ""
    ) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.step_seconds = step_seconds
        self.val_batches = val_batches
        self.val_seconds = val_seconds
        self.val_log = val_log
        self.first_step: int | None = None
        self._val_began = 0.0

    def training_step(self, batch, batch_idx):
        if self.first_step is None:
            self.first_step = self.trainer.global_step
            print(f"rank {self.global_rank}: first step at global_step {self.first_step}", flush=True)
        time.sleep(self.step_seconds)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        time.sleep(self.val_seconds)  # a forward pass over a held-out batch, as long as the job says
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def on_validation_start(self) -> None:
        self._val_began = time.time()

    def on_validation_end(self) -> None:
        if self.val_log and not self.trainer.sanity_checking:
            with open(self.val_log, "a") as f:
                f.write(json.dumps({"begin": self._val_began, "end": time.time()}) + "\n")

    def val_dataloader(self):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(8 * max(1, self.val_batches), 8, generator=g)
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), 8)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(256, 8, generator=g)
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), 8)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint-dir", required=True, help="shared storage that outlives the instance")
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--step-seconds", type=float, default=0.0)
    p.add_argument("--save-every", type=int, default=0, help="routine checkpoints every N steps (0: off)")
    p.add_argument("--val-every", type=int, default=0, help="validate every N steps (0: never)")
    p.add_argument("--val-batches", type=int, default=4)
    p.add_argument("--val-seconds", type=float, default=0.0, help="each validation batch's time")
    p.add_argument("--val-log", default="", help="append each validation's wall-clock edges here")
    args = p.parse_args()
    torch.manual_seed(0)
    agent = AgentCheckpoint(args.checkpoint_dir)
    routine = os.path.join(args.checkpoint_dir, "routine")
    callbacks: list[L.Callback] = [agent]
    if args.save_every:  # each save is reported to the agent, which counts the work a reclaim would lose
        callbacks.append(ModelCheckpoint(routine, every_n_train_steps=args.save_every, save_top_k=-1))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        max_steps=args.max_steps,
        callbacks=callbacks,
        enable_checkpointing=bool(args.save_every),
        default_root_dir=routine,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        val_check_interval=args.val_every or None,
        limit_val_batches=args.val_batches if args.val_every else 0,
        num_sanity_val_steps=0,
    )
    resume = latest_checkpoint(args.checkpoint_dir)  # None the first time: start from scratch
    print(f"rank {trainer.global_rank}: training, pid {os.getpid()}, resume from {resume}", flush=True)
    toy = Toy(args.step_seconds, args.val_batches, args.val_seconds, args.val_log)
    trainer.fit(toy, ckpt_path=resume)
    if agent.last_path:
        print(f"rank {trainer.global_rank}: stopped at {agent.last_path}, acked {agent.acked}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
