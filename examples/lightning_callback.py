"""PyTorch Lightning: checkpoint when training-node-agent asks.

    trainer = L.Trainer(callbacks=[AgentCheckpoint("/mnt/cpfs/run42")], ...)

Agent config: ``discover = ["nvml"]``, ``signal = "SIGUSR1"``. Under Slurm, Lightning's own
SLURMEnvironment also traps SIGUSR1 for auto-requeue: either pass
``plugins=[SLURMEnvironment(auto_requeue=False)]`` or use ``signal = "SIGUSR2"`` in the agent and
``AgentCheckpoint(..., signal="SIGUSR2")`` here.

``trainer.save_checkpoint`` must be called on every rank (sharded strategies write their shard); it
writes the file from rank 0 only. The flag is agreed across ranks with the strategy's
``reduce_boolean_decision(..., all=False)`` (any rank saw it -> all save at the same step).
"""

from __future__ import annotations

import os

import lightning.pytorch as L
from lightning.pytorch.callbacks import Callback

from agent.trainer import PreemptionGuard


class AgentCheckpoint(Callback):
    def __init__(self, dirpath: str, signal: str = "SIGUSR1", stop: bool = True) -> None:
        self.dirpath = dirpath  # shared storage (NAS/CPFS/OSS mount), never the instance's local disk
        self.signal = signal
        self.stop = stop
        self.guard: PreemptionGuard | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # the handler must be installed in the main thread of every rank's process
        self.guard = PreemptionGuard(signal=self.signal, rank=trainer.global_rank)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        assert self.guard is not None
        requested = trainer.strategy.reduce_boolean_decision(self.guard.checkpoint_requested, all=False)
        if not requested:
            return
        path = os.path.join(self.dirpath, f"preempt-step-{trainer.global_step}.ckpt")
        trainer.save_checkpoint(path)  # every rank calls it; the strategy decides who writes
        trainer.strategy.barrier("agent-checkpoint")
        if trainer.is_global_zero:
            self.guard.ack(step=trainer.global_step, path=path)
        else:
            self.guard.reset()
        if self.stop:
            trainer.should_stop = True

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.guard is not None:
            self.guard.uninstall()
