"""A synthetic trainer that really does each work pattern and drives the fake GPUs' state by phase.

    python -m lab.trainer --schedule compute:10,storage:10,network:10 --gpu-state S --log L [...]

Regimes (one training step each, repeated until the regime's seconds are up):

- ``compute``: the GPUs are busy; the process itself only sleeps (the work is on the "GPU");
- ``storage``: read the next batch with O_DIRECT (the cgroup throttles it) while the GPUs starve,
  then compute on it;
- ``cpu``: take the next batch from data-loader worker processes that burn CPU "decoding" it, while
  the GPUs starve, then compute; with ``--workers 0`` the trainer decodes each batch itself, as
  ``DataLoader(num_workers=0)`` does;
- ``network-input``: take the next batch from data-loader worker processes that each stream
  ``--objects`` objects of ``--object-bytes`` over one keep-alive HTTP connection from
  ``lab.objserver`` in the peer's namespace, through the shaped link, while the GPUs starve (a
  streaming dataset reading object storage), then compute;
- ``network``: exchange the step's gradients with the peer over the shaped link while the GPUs spin
  in the collective (utilization ~100%, low power, low SM activity), then compute;
- ``sync-wait``: spin while waiting for a straggler (``--straggle``), exchange a few KB
  (``--sync-bytes``), then compute: the GPUs spin but this node's network is quiet;
- ``checkpoint``: compute, with a short checkpoint write burst every ``--burst-every`` seconds; a
  checkpoint request from the agent (``tna_client.PreemptionGuard``) makes a long checkpoint of
  ``--checkpoint-seconds`` that is acknowledged when durable.

Every phase change is logged with its wall-clock time (the lab's ground truth). The process ends
by itself when the schedule is done, and sets the GPUs idle.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import os
import random
import signal
import socket
import sys
import time
from pathlib import Path

from tna_client import PreemptionGuard

from lab.blockdev import DirectReader
from lab.gpu import LabGpus, PhaseLog
from lab.peer import exchange

# Step times are drawn at random around their means (--compute-step, --step): a fixed period would
# alias with the agent's sampling interval (a 0.25 s step sampled every 0.2 s shows a wrong compute
# share for seconds)
REGIMES = ("compute", "storage", "cpu", "network-input", "network", "sync-wait", "checkpoint")


def jitter(mean: float) -> float:
    """Uniform within +-40% of ``mean``."""
    return mean * random.uniform(0.6, 1.4)


def parse_schedule(text: str) -> list[tuple[str, float]]:
    out = []
    for part in text.split(","):
        name, _, seconds = part.partition(":")
        if name not in REGIMES:
            raise SystemExit(f"unknown regime {name!r}; use {', '.join(REGIMES)}")
        out.append((name, float(seconds)))
    return out


def decode(cpu_seconds: float) -> bytes:
    """Burn about ``cpu_seconds`` of CPU (not wall) time: "decoding" one batch."""
    block = _BLOCK
    start = time.process_time()
    h = hashlib.sha256()
    cost = jitter(cpu_seconds)
    while time.process_time() - start < cost:
        for _ in range(32):
            h.update(block)
    return h.digest()


_BLOCK = os.urandom(1 << 16)


def decode_worker(queue: mp.Queue, cpu_seconds: float, parent: int) -> None:
    """A data-loader worker: burn ``cpu_seconds`` of CPU per batch, hand the batch over."""
    while os.getppid() == parent:
        queue.put(decode(cpu_seconds))


def stream_worker(
    queue: mp.Queue, server: str, index: int, workers: int, args: tuple[int, int], parent: int
) -> None:
    """A streaming data-loader worker: fetch each batch's objects over its own connection."""
    from lab.objserver import ObjectClient

    objects, object_bytes = args
    client = ObjectClient(server)
    i = index
    while os.getppid() == parent:
        h = hashlib.sha256()
        for _ in range(objects):
            h.update(client.get(i, object_bytes)[:64])
            i += workers
        queue.put(h.digest())


class Trainer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.gpus = LabGpus(Path(args.gpu_state), gpus=args.gpus)
        self.log = PhaseLog(Path(args.log))
        self.pid = os.getpid()
        self.regime = ""
        self.reader: DirectReader | None = None
        self.sock: socket.socket | None = None
        self.queue: mp.Queue | None = None
        self.workers: list[mp.Process] = []
        self.guard = PreemptionGuard(check_interval=0.1)
        self.last_burst = time.monotonic()
        self.step = 0

    def phase(self, name: str) -> None:
        if name != self.gpus.current:
            self.gpus.phase(name, self.pid)
            self.log.write(phase=name, regime=self.regime)

    # --- set-up ------------------------------------------------------------------------------------

    def prepare(self, schedule: list[tuple[str, float]]) -> None:
        regimes = {r for r, _ in schedule}
        a = self.args
        if "storage" in regimes:
            self.reader = DirectReader(Path(a.data), a.data_size, 4 * a.batch_bytes)
        if regimes & {"network", "sync-wait"}:
            host, _, port = a.peer.rpartition(":")
            self.sock = socket.create_connection((host, int(port)), timeout=30)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if "cpu" in regimes and a.workers > 0:
            self.start_workers([(decode_worker, (a.decode_seconds, self.pid))] * a.workers, a.decode_seconds)
        if "network-input" in regimes:
            n, each = max(1, a.workers), (a.objects, a.object_bytes)
            batch = a.objects * a.object_bytes * 8 / (a.link_mbit * 1e6)  # seconds a batch takes on the link
            self.start_workers([(stream_worker, (a.peer, k, n, each, self.pid)) for k in range(n)], batch)

    def start_workers(self, targets: list[tuple], batch_seconds: float) -> None:
        # workers first: the agent follows the trainer's process tree from the moment the GPUs
        # show its pid
        ctx = mp.get_context("fork")
        self.queue = ctx.Queue(maxsize=2)
        for target, args in targets:
            w = ctx.Process(target=target, args=(self.queue, *args), daemon=True)
            w.start()
            self.workers.append(w)
        # the first batches arrive together (every worker prefetched one): take them before the
        # job shows on the GPUs, so the regime the lab scores is the steady, input-bound one
        deadline = time.monotonic() + 10 * batch_seconds * len(targets) + 10
        while time.monotonic() < deadline:
            start = time.monotonic()
            self.queue.get(timeout=10 * batch_seconds * len(targets) + 10)
            if time.monotonic() - start > batch_seconds / 3:
                break

    def close(self) -> None:
        self.gpus.phase("idle", None)
        self.log.write(phase="idle", regime="end")
        for w in self.workers:
            w.terminate()
        for w in self.workers:
            w.join(2)
        if self.reader:
            self.reader.close()
        if self.sock:
            self.sock.close()
        self.log.close()

    # --- steps -------------------------------------------------------------------------------------

    def compute(self, seconds: float) -> None:
        self.phase("compute")
        time.sleep(jitter(seconds))

    def run_step(self, regime: str) -> None:
        a = self.args
        if regime == "compute":
            self.compute(a.step)
        elif regime == "storage":
            assert self.reader is not None
            self.phase("starved")
            began = time.monotonic()
            self.reader.read(random.randint(1, 5) * (self.args.batch_bytes // 3))
            took = time.monotonic() - began
            # the throttle's real pace: blk-throttle lets a read under one slice's budget through at
            # once (9904's 0.7 MB batches at 8 MiB/s took ~0, and its GPUs computed 82% of the time,
            # not 65%), so a drawn share of compute follows the read just made
            share = a.compute_share
            self.compute(took * share / (1.0 - share) if share else a.compute_step)
        elif regime == "cpu":
            self.phase("starved")
            if self.queue is None:  # num_workers=0: the training process decodes the batch itself
                decode(a.decode_seconds)
            else:
                self.queue.get(timeout=30)
            self.compute(a.compute_step)
        elif regime == "network-input":
            assert self.queue is not None
            self.phase("starved")
            self.queue.get(timeout=60)
            self.compute(a.compute_step)
        elif regime == "network":
            assert self.sock is not None
            self.phase("spin")
            exchange(self.sock, int(jitter(a.grad_bytes)))
            self.compute(a.compute_step)
        elif regime == "sync-wait":
            assert self.sock is not None
            self.phase("spin")
            time.sleep(jitter(a.straggle))  # the straggler on another node
            exchange(self.sock, a.sync_bytes)
            self.compute(a.compute_step)
        elif regime == "checkpoint":
            self.compute(a.step)
            if time.monotonic() - self.last_burst >= a.burst_every:
                self.write_checkpoint(a.burst_bytes, 0.0, "burst")
                self.last_burst = time.monotonic()
        if self.guard.checkpoint_requested:
            path = self.write_checkpoint(a.burst_bytes, a.checkpoint_seconds, "requested")
            self.guard.ack(step=self.step, path=str(path))
            self.log.write(event="checkpoint-acked", regime=self.regime)
        self.step += 1

    def write_checkpoint(self, nbytes: int, at_least: float, why: str) -> Path:
        """GPUs idle while the state is written and fsynced, for at least ``at_least`` seconds."""
        self.phase("starved")
        self.log.write(event=f"checkpoint-{why}", regime=self.regime)
        path = Path(self.args.checkpoint_dir) / f"ckpt-{self.step}.bin"
        start = time.monotonic()
        chunk = os.urandom(1 << 20)
        while True:
            with open(path, "wb") as f:
                for _ in range(max(1, nbytes >> 20)):
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            if time.monotonic() - start >= at_least:
                break
            time.sleep(0.05)
        path.unlink(missing_ok=True)  # keep the disk from filling; what matters is the I/O
        return path

    def run(self, schedule: list[tuple[str, float]]) -> None:
        self.prepare(schedule)
        for regime, seconds in schedule:
            self.regime = regime
            self.log.write(regime=regime, seconds=seconds)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                self.run_step(regime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="synthetic trainer for the classifier lab")
    ap.add_argument("--schedule", required=True, help="regime:seconds,... e.g. compute:10,storage:10")
    ap.add_argument("--gpu-state", required=True, help="the fake NVML state file to drive")
    ap.add_argument("--log", required=True, help="JSON-lines phase log (ground truth)")
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--data", help="file or block device read with O_DIRECT (storage regime)")
    ap.add_argument("--data-size", type=int, default=64 << 20)
    ap.add_argument("--batch-bytes", type=int, default=4 << 20, help="mean batch size")
    ap.add_argument(
        "--peer", help="HOST:PORT of lab.peer (network, sync-wait) or lab.objserver (network-input)"
    )
    ap.add_argument("--objects", type=int, default=4, help="objects per batch (network-input)")
    ap.add_argument("--object-bytes", type=int, default=1 << 20, help="bytes per object (network-input)")
    ap.add_argument(
        "--link-mbit", type=float, default=50, help="the link's rate, for the prefetch (network-input)"
    )
    ap.add_argument("--grad-bytes", type=int, default=3_500_000, help="mean gradient size per step")
    ap.add_argument(
        "--workers", type=int, default=3, help="data-loader workers (cpu, network-input); 0: decode inline"
    )
    ap.add_argument("--step", type=float, default=0.25, help="mean GPU seconds per step (compute regime)")
    ap.add_argument("--compute-step", type=float, default=0.1, help="mean GPU seconds per bottlenecked step")
    ap.add_argument(
        "--compute-share",
        type=float,
        default=0.0,
        help="storage: compute this share of each step, after the read just made (0: --compute-step)",
    )
    ap.add_argument("--straggle", type=float, default=0.4, help="mean seconds waiting for the straggler")
    ap.add_argument("--sync-bytes", type=int, default=16 << 10, help="bytes exchanged after a straggler")
    ap.add_argument("--decode-seconds", type=float, default=0.45, help="CPU seconds per batch per worker")
    ap.add_argument("--checkpoint-dir", default="/tmp")
    ap.add_argument("--burst-every", type=float, default=4.0)
    ap.add_argument("--burst-bytes", type=int, default=16 << 20)
    ap.add_argument("--checkpoint-seconds", type=float, default=3.0)
    args = ap.parse_args(argv)
    schedule = parse_schedule(args.schedule)
    trainer = Trainer(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        trainer.run(schedule)
    finally:
        trainer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
