"""Hugging Face Trainer: checkpoint when training-node-agent asks, and resume from it.

    from transformers import Trainer, TrainingArguments
    from tna_client.hf import AgentCheckpointCallback

    args = TrainingArguments(output_dir="/mnt/cpfs/run42", ...)   # shared storage
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[AgentCheckpointCallback()])
    trainer.train(resume_from_checkpoint=has_checkpoint(args.output_dir))   # the newest checkpoint-N

On a request every rank agrees on the flag (one all-reduce), the Trainer saves ``checkpoint-<step>``
right after the step and stops; in ``on_save`` every rank waits at a barrier, then rank 0 flushes the
checkpoint directory to disk, runs ``on_durable(path)`` if given (an upload), and acks.
``train(resume_from_checkpoint=...)`` resumes at the acked ``global_step``. Each step's end is a
step boundary for the agent's step figures (:meth:`~tna_client.PreemptionGuard.step`). Every other save
(``save_steps``) is reported to the agent as it happens. The pauses are told to the agent as they
happen (:mod:`tna_client.spans`): an evaluation from the step's end to ``on_evaluate``, a save from
then (or the step's end) to ``on_save``, and the time from one step's end to the next one's start,
less those, as the wait for ``data``.

**JIT checkpoint mode** (``TrainingArguments(enable_jit_checkpoint=True)``, agent ``signal =
"SIGTERM"``): the Trainer's own SIGTERM handler saves through ``Trainer._save_checkpoint`` from its
``JITCheckpointCallback``, which never calls ``on_save``. That callback is one of the Trainer's
default callbacks, so it runs before this one on each event; pass ``signal=None`` here and this
callback sees, on the same event, that the JIT checkpoint ``checkpoint-<step>`` was written (its
``checkpoint-is-incomplete.txt`` marker gone) and acks it after flushing it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from tna_client.guard import PreemptionGuard
from tna_client.torch_dist import any_rank, barrier

JIT_INCOMPLETE = "checkpoint-is-incomplete.txt"  # transformers' trainer_jit_checkpoint marker


def has_checkpoint(output_dir: str) -> str | None:
    """The newest ``checkpoint-<N>`` in ``output_dir``, for ``train(resume_from_checkpoint=...)``."""
    return get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None


def _checkpoint_dir(args: TrainingArguments, state: TrainerState) -> str:
    # the name Trainer._save_checkpoint gives it (output_dir is always set by TrainingArguments)
    return os.path.join(str(args.output_dir), f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")


class AgentCheckpointCallback(TrainerCallback):
    def __init__(
        self,
        signal: str | None = "",
        on_durable: Callable[[str], object] | None = None,
        **guard_args: Any,
    ) -> None:
        self.signal = signal
        self.on_durable = on_durable
        self.guard_args = guard_args
        self.guard: PreemptionGuard | None = None
        self.acked: bool | None = None  # whether the agent was told about the last checkpoint
        self.last_path: str | None = None
        self._saving = False
        self._step_end = time.monotonic()
        self._input_from: float | None = None  # since when the loop waits for its next batch

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.guard is None:
            self.guard = PreemptionGuard(signal=self.signal, rank=args.process_index, **self.guard_args)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._step_end = time.monotonic()
        if self.guard is None:
            return
        self.guard.step()  # the step figures for the agent: a clock read, a report every few seconds
        self._input_from = self._step_end
        if args.enable_jit_checkpoint:
            self._after_jit(args, state, control)
        elif any_rank(self.guard.checkpoint_requested):
            self._saving = True
            control.should_save = True  # the Trainer saves right after this step, on every rank
            control.should_training_stop = True
        # the flow callback ran before us: what the Trainer does next (evaluate, then save) is known
        if control.should_evaluate:
            self._pause("evaluation")
        elif control.should_save:
            self._pause("checkpoint")

    def _pause(self, kind: str) -> None:
        """The loop stops for ``kind``: the time until it resumes is no wait for data."""
        assert self.guard is not None
        self.guard.begin(kind)
        self._input_from = None

    def _resume(self, kind: str) -> None:
        assert self.guard is not None
        self.guard.end(kind)
        self._input_from = time.monotonic()

    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.guard is None:
            return
        self._resume("evaluation")
        if control.should_save:  # the Trainer saves right after evaluating
            self._pause("checkpoint")

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.guard is None:
            return
        self._resume("checkpoint")
        path = _checkpoint_dir(args, state)
        seconds = time.monotonic() - self._step_end
        if not self._saving:
            self.guard.saved(state.global_step, path, seconds)  # a routine save
            return
        self._saving = False
        barrier()  # every rank's part (its rng state, its shard) is written
        self.last_path = path
        self.acked = self.guard.confirm(state.global_step, path, self.on_durable, seconds)

    # JIT mode: the Trainer's JITCheckpointCallback saved on one of these events just before us
    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.guard is not None and self._input_from is not None:
            self.guard.waited("data", time.monotonic() - self._input_from)
        self._input_from = None
        self._after_jit(args, state, control)

    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._after_jit(args, state, control)

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._after_jit(args, state, control)

    def _after_jit(self, args: TrainingArguments, state: TrainerState, control: TrainerControl) -> None:
        if self.guard is None or not args.enable_jit_checkpoint or not control.should_training_stop:
            return
        path = _checkpoint_dir(args, state)
        if not os.path.isdir(path) or os.path.exists(os.path.join(path, JIT_INCOMPLETE)):
            return
        self.guard.poll(force=True)
        if not self.guard.checkpoint_requested:
            return  # a SIGTERM that did not come with a request: nobody to ack
        self.last_path = path
        self.acked = self.guard.confirm(state.global_step, path, self.on_durable, None)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.guard is not None:
            self.guard.uninstall()
            self.guard = None
