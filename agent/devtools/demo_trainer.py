"""A toy training loop on ``tna_client``, the client a training script installs (client/): the
trainer of ``training-node-agent demo``, and a real process for the checkpoint tests. Standard
library and ``tna_client`` only, as in a training environment without the agent.

    python -m agent.devtools.demo_trainer --checkpoint-dir /mnt/nas/ckpt --save-seconds 2

It finds the agent as any script does (its discovery record, or $TNA_CHECKPOINT_REQUEST_FILE, which
the demo sets); ``--request-file`` passes the path instead (tests).

It "trains" (sleeps a step at a time), and when the agent asks for a checkpoint it writes one (taking
``--save-seconds``), acknowledges it and exits 0, or keeps going with ``--keep-going`` (drills).
``--events FILE`` appends one JSON line per signal received and per checkpoint, for tests.

``--mode-file FILE`` lets the demo make it input-bound: while FILE says ``decode``, it decodes every
batch itself before the step, as a DataLoader with ``num_workers=0`` does: ``--decode-seconds`` of
real CPU work in this process, which the agent sees in its schedstat. ``train`` (or no file) is back
to batches ready when the step wants them. A file, not a signal: the demo's state is in it, and a
late or lost signal cannot leave the trainer in the wrong phase.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from tna_client import PreemptionGuard, rank_from_env


class _Events:
    def __init__(self, path: str | None) -> None:
        self.path = path

    def write(self, kind: str, **fields: Any) -> None:
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps({"event": kind, "pid": os.getpid(), "at": time.time(), **fields}) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="demo_trainer", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--request-file", default=None)
    p.add_argument("--signal", default="SIGUSR1")
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--step-seconds", type=float, default=0.1)
    p.add_argument("--save-seconds", type=float, default=1.0)
    p.add_argument("--print-every", type=int, default=10)
    p.add_argument("--keep-going", action="store_true", help="continue training after the ack")
    p.add_argument("--no-ack", action="store_true", help="checkpoint but never acknowledge (tests)")
    p.add_argument("--ignore-requests", action="store_true", help="take the signal, do nothing (tests)")
    p.add_argument("--events", default=None, help="append JSON lines: signal, checkpoint, ack")
    p.add_argument("--prefix", default="[trainer] ")
    p.add_argument("--mode-file", default=None, help="'decode' in it: decode every batch in-process")
    p.add_argument("--decode-seconds", type=float, default=0.5, help="CPU work per batch when decoding")
    p.add_argument(
        "--resume", action="store_true", help="start after the newest checkpoint in --checkpoint-dir"
    )
    args = p.parse_args(argv)

    events = _Events(args.events)
    signum = int(signal.Signals[args.signal if args.signal.startswith("SIG") else "SIG" + args.signal])

    def count(sig: int, _frame: object) -> None:
        events.write("signal", signal=signal.Signals(sig).name)

    signal.signal(signum, count)  # the guard chains to this, so every arrival is logged
    guard = PreemptionGuard(signal=signum, request_file=args.request_file, check_interval=0.1)
    rank = rank_from_env()
    say = _printer(args.prefix)
    events.write("started", rank=rank)
    say(f"rank {rank} started, pid {os.getpid()}; checkpoints go to {args.checkpoint_dir}")
    say(f"requests are read from {guard.request_file} (via {guard.located.via})")
    loss = 2.5
    first = 1
    if args.resume:
        last = _newest(args.checkpoint_dir)
        if last is not None:
            first = last[0] + 1
            events.write("resumed", step=last[0], path=last[1])
            say(f"resumed from step {last[0]} ({last[1]})")
    decoding = False
    for step in range(first, args.steps + 1):
        if args.mode_file and decoding != (_mode(args.mode_file) == "decode"):
            decoding = not decoding
            if decoding:
                say(
                    f"num_workers=0 now: decoding every batch in this process, "
                    f"{args.decode_seconds:.1f} s of CPU each, while the GPUs wait"
                )
            else:
                say("fed again: batches are ready when the step asks, the GPUs no longer wait for input")
        if decoding:
            _decode(args.decode_seconds)
        time.sleep(args.step_seconds)
        loss = 0.1 + 2.4 * math.exp(-step / 150)
        if step % args.print_every == 0:
            say(f"step {step:>5}  loss {loss:.3f}")
        if not guard.checkpoint_requested or args.ignore_requests:
            continue
        left = guard.seconds_remaining()
        kind = guard.request.get("kind") if guard.request else "signal"
        via = (guard.seen or {}).get("via") or (args.signal if guard.signalled_at else "file")
        how = "request file seen" if via == "file" else f"{via} received"
        say(f"{how}: checkpoint requested ({kind}, {_left(left)})")
        if not guard.should_save:
            guard.ack()
            say("not rank 0: rank 0 saves")
        else:
            path = _save(args.checkpoint_dir, step, loss, args.save_seconds)
            events.write("checkpoint", step=step, path=path)
            if args.no_ack:
                say(f"saved {path}; not acknowledging (--no-ack)")
                guard.reset()
            else:
                guard.ack(step=step, path=path)
                events.write("ack", step=step, path=path)
                say(f"saved step {step} to {path} in {args.save_seconds:.1f} s; ack sent")
        if not args.keep_going:
            say("exiting cleanly before the instance goes away")
            return 0
    return 0


def _mode(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "train"


def _decode(seconds: float) -> None:
    """A batch decoded on the CPU: hashing stands in for JPEG decoding and augmentation. Bounded by
    the clock, not by work done, so a loaded box makes it no longer (the time it waits for a core
    counts in schedstat as well: the agent sees a process that would use a whole core)."""
    block = bytes(range(256)) * 256
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        hashlib.sha256(block).digest()


def _save(directory: str, step: int, loss: float, seconds: float) -> str:
    """A stand-in for torch.save: the write takes ``seconds``, then is made durable and atomic."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"step-{step:06d}.ckpt.json")
    time.sleep(seconds)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"step": step, "loss": loss}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def _newest(directory: str) -> tuple[int, str] | None:
    """The newest checkpoint _save wrote: (step, path), or None."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith("step-") and n.endswith(".ckpt.json"))
    except OSError:
        return None
    if not names:
        return None
    path = os.path.join(directory, names[-1])
    with open(path) as f:
        return int(json.load(f)["step"]), path


def _left(seconds: float | None) -> str:
    return "no deadline given" if seconds is None else f"{seconds:.0f} s left"


def _printer(prefix: str) -> Callable[[str], None]:
    def say(text: str) -> None:
        print(prefix + text, flush=True)

    return say


if __name__ == "__main__":
    sys.exit(main())
