"""Plain PyTorch and accelerate: the checkpoint handshake for ``torch.distributed`` jobs.

A notice reaches only the preempted node, yet every rank must save at the same step or the next
collective hangs. :class:`DistributedCheckpoint` agrees on the flag with one all-reduce (MAX) and
runs the save, the barrier, the flush and the ack in the right order::

    from tna_client.torch_dist import DistributedCheckpoint, latest

    ckpt = DistributedCheckpoint()                     # builds the PreemptionGuard (every rank)
    start = resume(latest("/mnt/cpfs/run42"))          # resume: the newest step-*.pt, if any
    for step in range(start + 1, steps + 1):
        train_step()
        if ckpt.requested():                           # True on every rank when any rank saw it
            ckpt.checkpoint(step, lambda: save("/mnt/cpfs/run42", step))   # rank 0 saves, all wait
            break

With accelerate, pass a save that every rank runs (``accelerator.save_state`` is collective)::

    ckpt.checkpoint(step, lambda: accelerator.save_state(f"/mnt/cpfs/run42/step-{step}") or path,
                    all_ranks=True)
    # resume: accelerator.load_state(latest_dir); the step comes from your own bookkeeping

``torch`` is imported on first use, so importing this module costs nothing.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any

from tna_client.guard import PreemptionGuard


def _dist() -> Any:
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def any_rank(flag: bool) -> bool:
    """``flag`` OR-ed over every rank (one all-reduce MAX); ``flag`` itself without a process group."""
    dist = _dist()
    if dist is None:
        return flag
    import torch

    # NCCL reduces only CUDA tensors; gloo only CPU ones
    on_gpu = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    t = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def barrier() -> None:
    dist = _dist()
    if dist is not None:
        dist.barrier()


def latest(directory: str, pattern: str = r"^step-(\d+)") -> str | None:
    """The checkpoint in ``directory`` with the highest step in its name (``step-00001200.pt``),
    ignoring temporary names (``.tmp`` and names starting with '.'): what to resume from."""
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    rx = re.compile(pattern)
    best: tuple[int, str] | None = None
    for name in names:
        m = rx.match(name)
        if m is None or name.startswith(".") or name.endswith(".tmp"):
            continue
        if best is None or int(m.group(1)) > best[0]:
            best = (int(m.group(1)), name)
    return None if best is None else os.path.join(directory, best[1])


class DistributedCheckpoint:
    """The handshake for a hand-written loop, one process or many.

    ``every``: agree on the flag every N calls of :meth:`requested` (all ranks must use the same N).
    ``on_durable(path)``: run after the checkpoint is flushed and before the ack (object-store upload).
    """

    def __init__(
        self,
        guard: PreemptionGuard | None = None,
        every: int = 1,
        on_durable: Callable[[str], object] | None = None,
        **guard_args: Any,
    ) -> None:
        if guard is None:
            dist = _dist()
            rank = dist.get_rank() if dist is not None else None
            guard = PreemptionGuard(rank=rank, **guard_args)
        self.guard = guard
        self.every = max(1, every)
        self.on_durable = on_durable
        self.acked: bool | None = None  # the last checkpoint's ack: None before any
        self._calls = 0

    def requested(self) -> bool:
        """True on every rank as soon as any rank saw the request (a collective: call it on all)."""
        self._calls += 1
        if self._calls % self.every:
            return False
        return any_rank(self.guard.checkpoint_requested)

    def checkpoint(self, step: int, save: Callable[[], str | None], all_ranks: bool = False) -> str | None:
        """Save (``save()`` returns the path; on rank 0 only unless ``all_ranks``), wait for every
        rank, flush, ack. Returns the path on rank 0. :attr:`acked` says whether the agent was told."""
        t0 = time.monotonic()
        with self.guard.span("checkpoint"):  # the GPUs wait for it: the agent books it as checkpoint
            path = save() if all_ranks or self.guard.should_save else None
            barrier()  # nobody moves on before the checkpoint is written
        self.acked = self.guard.confirm(step, path, self.on_durable, time.monotonic() - t0)
        return path

    def routine(self, step: int, save: Callable[[], str | None], all_ranks: bool = False) -> str | None:
        """A save the loop makes on its own schedule (``save()`` on rank 0 unless ``all_ranks``), every
        rank waiting for it: the agent is told how long it held the loop and where it went."""
        t0 = time.monotonic()
        with self.guard.span("checkpoint"):
            path = save() if all_ranks or self.guard.rank == 0 else None
            barrier()
        if path is not None:
            self.periodic(step, path, time.monotonic() - t0)
        return path

    def periodic(self, step: int, path: str, seconds: float | None = None) -> None:
        """Report a routine save (rank 0) so the agent knows how much work a preemption would lose."""
        self.guard.saved(step, path, seconds)

    def close(self) -> None:
        self.guard.uninstall()
