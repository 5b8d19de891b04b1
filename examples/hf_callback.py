"""Hugging Face Trainer: checkpoint when training-node-agent asks.

    trainer = Trainer(model=..., args=TrainingArguments(output_dir="/mnt/cpfs/run42", ...),
                      callbacks=[AgentCheckpointCallback()])

Two ways to set it up:

* ``signal = "SIGUSR1"`` in the agent (default): this callback installs the handler, asks the Trainer
  to save at the end of the current step and to stop, and acks once the checkpoint is written.
* ``signal = "SIGTERM"`` with ``TrainingArguments(enable_jit_checkpoint=True)`` (recent transformers):
  the Trainer's own SIGTERM handler does the just-in-time checkpoint; pass ``signal=None`` here so
  this callback only watches the request file and acks from ``on_save``.

``output_dir`` must be shared storage (NAS/CPFS, or an OSS mount) so the checkpoint outlives the
instance. Callbacks run on every rank; only the world-process-zero acks.
"""

from __future__ import annotations

import os

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from agent.trainer import PreemptionGuard


class AgentCheckpointCallback(TrainerCallback):
    def __init__(self, signal: str | None = "SIGUSR1") -> None:
        self.signal = signal
        self.guard: PreemptionGuard | None = None
        self.saving = False

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw):
        self.guard = PreemptionGuard(signal=self.signal, rank=args.process_index)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw):
        if self.guard is None or not _any_rank(self.guard.checkpoint_requested):
            return control
        self.saving = True
        control.should_save = True  # the Trainer saves right after this step, on every rank
        control.should_training_stop = True
        return control

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw):
        if self.guard is None or not (self.saving or self.guard.checkpoint_requested):
            return control
        path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if state.is_world_process_zero:
            self.guard.ack(step=state.global_step, path=path)
        else:
            self.guard.reset()
        self.saving = False
        return control

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw):
        if self.guard is not None:
            self.guard.uninstall()


def _any_rank(flag: bool) -> bool:
    """Agree across ranks (MAX all-reduce) so every rank saves at the same step."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return flag
    if not (dist.is_available() and dist.is_initialized()):
        return flag
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    t = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())
