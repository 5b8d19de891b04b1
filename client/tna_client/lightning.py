"""PyTorch Lightning: checkpoint when training-node-agent asks, and resume from it.

    import lightning.pytorch as L
    from tna_client.lightning import AgentCheckpoint, latest_checkpoint

    ckpt_dir = "/mnt/cpfs/run42"                       # shared storage, never the instance's disk
    trainer = L.Trainer(callbacks=[AgentCheckpoint(ckpt_dir)], ...)
    trainer.fit(model, ckpt_path=latest_checkpoint(ckpt_dir))   # None on the first run: from scratch

On a request every rank agrees on the flag (``reduce_boolean_decision(..., all=False)``: any rank saw
it -> all save at the same step), calls ``trainer.save_checkpoint`` (sharded strategies write their
shard, otherwise rank 0 writes), waits at a barrier; rank 0 flushes the file to disk, runs
``on_durable(path)`` if given (an upload), acks, and the run stops. ``fit(ckpt_path=...)`` resumes at
the acked ``global_step``. Each batch's end is a step boundary for the agent's step figures
(:meth:`~tna_client.PreemptionGuard.step`). Routine saves by ``ModelCheckpoint`` are reported to the
agent as they happen (:meth:`~tna_client.PreemptionGuard.saved`). The pauses it sees are told to the
agent as they happen (:mod:`tna_client.spans`): every ``trainer.save_checkpoint`` (ModelCheckpoint's
included) as ``checkpoint``, the validation loop as ``evaluation``, and the time from one batch's end
to the next one's start, less those, as ``data``.

Agent config: ``signal = "SIGUSR1"``. Under Slurm, Lightning's ``SLURMEnvironment`` also traps SIGUSR1
for auto-requeue: pass ``plugins=[SLURMEnvironment(auto_requeue=False)]`` or use ``signal = "SIGUSR2"``
in the agent and ``AgentCheckpoint(..., signal="SIGUSR2")`` here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import lightning.pytorch as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from tna_client.guard import PreemptionGuard
from tna_client.torch_dist import latest

PREFIX = "preempt-step-"


def latest_checkpoint(dirpath: str) -> str | None:
    """The newest ``preempt-step-<N>.ckpt`` in ``dirpath``: pass it as ``fit(ckpt_path=...)``."""
    return latest(dirpath, rf"^{PREFIX}(\d+)\.ckpt$")


class AgentCheckpoint(Callback):
    def __init__(
        self,
        dirpath: str,
        signal: str | None = "",
        stop: bool = True,
        on_durable: Callable[[str], object] | None = None,
        **guard_args: Any,
    ) -> None:
        self.dirpath = dirpath
        self.signal = signal
        self.stop = stop
        self.on_durable = on_durable
        self.guard_args = guard_args
        self.guard: PreemptionGuard | None = None
        self.acked: bool | None = None  # whether the agent was told about the last checkpoint
        self.last_path: str | None = None
        self._reported: dict[int, tuple[str, str]] = {}
        self._batch_end: float | None = None  # monotonic end of the last batch, while waiting for input
        self._wrapped: Any = None  # the Trainer whose save_checkpoint we timed

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # every rank's process runs this in its main thread, where a handler can be installed
        if self.guard is None:
            self.guard = PreemptionGuard(signal=self.signal, rank=trainer.global_rank, **self.guard_args)
        if self._wrapped is None:
            self._time_saves(trainer)

    def _time_saves(self, trainer: L.Trainer) -> None:
        """Every save through the Trainer (ModelCheckpoint's, ours, the user's) is a checkpoint span:
        every rank calls it and waits in it, whichever rank writes."""
        save = trainer.save_checkpoint

        def timed(*args: Any, **kwargs: Any) -> Any:
            guard = self.guard
            if guard is None:
                return save(*args, **kwargs)
            self._batch_end = None
            try:
                with guard.span("checkpoint"):
                    return save(*args, **kwargs)
            finally:
                self._batch_end = time.monotonic()

        trainer.save_checkpoint = timed  # type: ignore[method-assign]
        self._wrapped = trainer

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.guard is not None:
            self._batch_end = None
            self.guard.begin("evaluation")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.guard is not None:
            self.guard.end("evaluation")
            self._batch_end = time.monotonic()

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.guard is not None and self._batch_end is not None:
            self.guard.waited("data", time.monotonic() - self._batch_end)
        self._batch_end = None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        assert self.guard is not None
        self.guard.step()  # the step figures for the agent: a clock read, a report every few seconds
        self._batch_end = time.monotonic()
        self._report_routine(trainer)
        if not trainer.strategy.reduce_boolean_decision(self.guard.checkpoint_requested, all=False):
            return
        t0 = time.monotonic()
        step = trainer.global_step
        path = os.path.join(self.dirpath, f"{PREFIX}{step}.ckpt")
        trainer.save_checkpoint(path)  # every rank calls it; the strategy decides who writes
        trainer.strategy.barrier("tna-checkpoint")
        self.last_path = path
        self.acked = self.guard.confirm(step, path, self.on_durable, time.monotonic() - t0)
        if self.stop:
            trainer.should_stop = True

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._report_routine(trainer)

    def _report_routine(self, trainer: L.Trainer) -> None:
        """A ModelCheckpoint save since the last look: tell the agent (rank 0)."""
        if self.guard is None or not trainer.is_global_zero:
            return
        for cb in trainer.checkpoint_callbacks:
            if not isinstance(cb, ModelCheckpoint):
                continue
            paths = (cb.last_model_path, cb.best_model_path)
            if paths != self._reported.get(id(cb), ("", "")) and any(paths):
                self._reported[id(cb)] = paths
                step = getattr(cb, "_last_global_step_saved", trainer.global_step)
                self.guard.saved(step, cb.last_model_path or cb.best_model_path, None)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._wrapped is trainer:
            del trainer.save_checkpoint  # the class's method again
            self._wrapped = None
        if self.guard is not None:
            self.guard.uninstall()
            self.guard = None
