"""A real PyTorch training job for the lab, with fake GPU state that follows its real phase.

    python lab/torchjob.py --mode jpeg --workers 0 --images DIR --gpu-state S --log L ...
    torchrun --nnodes 2 --node-rank R ... lab/torchjob.py --mode dist --elems 1048576 ...

Each step has three phases, and the fake GPUs of this rank show the one it is in:

- **waiting for the next batch** (``starved``): ``next()`` on a ``torch.utils.data.DataLoader``;
- **forward/backward** (``compute``): a small model on the batch, plus ``--gpu-seconds`` standing in
  for the kernels a real GPU would run;
- **inside the all-reduce** (``spin``, ``--mode dist``): ``torch.distributed.all_reduce`` of a
  gradient bucket of ``--elems`` float32 over gloo, as NCCL's spinning kernels would show.

Modes: ``jpeg`` decodes real JPEG files (Pillow) in the DataLoader's workers (``--workers 0``: in
the training process itself); ``pool`` decodes each batch in a one-process ``multiprocessing.Pool``
with a synchronous ``map`` (the worker works only while the training process, and so the GPUs,
wait); ``direct`` reads samples with O_DIRECT from the lab's throttled device; ``stream`` fetches
objects of ``--object-bytes`` over HTTP (``lab.objserver`` behind the shaped link, one keep-alive
connection per DataLoader worker), as a streaming dataset reads object storage; ``dist`` takes
synthetic batches and all-reduces every step; ``compute`` takes synthetic batches and only computes
(the GPUs are what limits it), with ``--save-every`` a synchronous ``torch.save`` of ``--save-bytes``
into ``--checkpoint-dir``, fsynced, while the GPUs idle. ``--decode-seconds`` sizes a decoding batch (jpeg,
pool) from the measured CPU time of one image, so a batch costs that much on any box. The job ends
by itself after ``--seconds`` (in ``dist``, rank 0 decides and the stop rides on the last
all-reduce, so both ranks make the same number of calls).

The host-side shapes (issue 48), each a single process launched with no rank count: ``launch``
dispatches ``--ops`` tiny ops a step one by one from the main thread, its GPUs showing small kernels
(``small``: a kernel resident most of the time, little work in each); ``copy`` copies ``--copy-bytes``
of pageable host memory a step (in eight chunks, each GPU's PCIe receive counter advancing by each),
its GPUs starved meanwhile, then computes for as long as makes the copies ``--copy-share`` of the
step on this box; ``compute`` with ``--save-direct`` writes each save with O_DIRECT to that path, so
every byte crosses the lab's write throttle (a synchronous save to a slow volume).
"""

from __future__ import annotations

import argparse
import io
import mmap
import os
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Sampler

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from lab.gpu import LabGpus, PhaseLog  # run as a script by torchrun: the repo is put on the path

SIDE = 160  # the decoded, resized image side


class JpegFolder(Dataset):
    """Decode + resize + flip, the usual image pipeline, on real JPEG files."""

    def __init__(self, folder: Path) -> None:
        self.files = sorted(folder.glob("*.jpg"))

    def __len__(self) -> int:
        return 1 << 30  # cycles over the files: the job ends by time, not by epoch

    def raw(self, i: int) -> bytes:
        """Image ``i`` decoded, resized and maybe flipped: SIDE x SIDE x 3 bytes."""
        from PIL import Image

        with Image.open(self.files[i % len(self.files)]) as im:
            img = im.convert("RGB").resize((SIDE, SIDE))
            if i % 2:
                img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            return img.tobytes()

    def __getitem__(self, i: int) -> torch.Tensor:
        return as_images(self.raw(i), 1)[0]


def as_images(data: bytes, n: int) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(n, SIDE, SIDE, 3).permute(0, 3, 1, 2)


class DirectSamples(Dataset):
    """Samples read with O_DIRECT from a file or device: every byte crosses the cgroup's throttle."""

    def __init__(self, path: str, size: int, sample_bytes: int) -> None:
        self.path, self.sample_bytes = path, sample_bytes
        self.count = max(1, size // sample_bytes)
        self.fd: int | None = None  # opened in each worker
        self.buf: mmap.mmap | None = None

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
            self.buf = mmap.mmap(-1, self.sample_bytes)
        assert self.buf is not None
        os.preadv(self.fd, [self.buf], (i % self.count) * self.sample_bytes)
        return torch.frombuffer(bytearray(self.buf[: 3 * 32 * 32]), dtype=torch.uint8).view(3, 32, 32)


class StreamedObjects(Dataset):
    """Objects fetched over HTTP, one keep-alive connection per worker (WebDataset, MosaicML
    Streaming, HF ``datasets`` streaming, reading a bucket)."""

    def __init__(self, server: str, object_bytes: int) -> None:
        self.server, self.object_bytes = server, object_bytes
        self.client = None  # opened in each worker

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> torch.Tensor:
        from lab.objserver import ObjectClient

        if self.client is None:
            self.client = ObjectClient(self.server)
        data = self.client.get(i, self.object_bytes)
        return torch.frombuffer(bytearray(data[: 3 * 32 * 32]), dtype=torch.uint8).view(3, 32, 32)


def decode_batch(job: tuple[str, int, int]) -> bytes:
    """The pool's work: decode images ``start`` .. ``start + n``."""
    folder, start, n = job
    ds = JpegFolder(Path(folder))
    return b"".join(ds.raw(i) for i in range(start, start + n))


def save(folder: Path, size: int) -> None:
    """``torch.save`` of ``size`` bytes of state, flushed to disk, as a synchronous checkpoint."""
    state = {"weights": torch.randn(size // 4)}
    path = folder / f"torchjob-{os.getpid()}.pt"
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


ALIGN = 4096


def save_direct(path: Path, state: dict, wrap: int) -> int:
    """``torch.save`` of ``state`` to a buffer, then written with O_DIRECT to ``path`` (a file, or the
    lab's loop device, cycling within its first ``wrap`` bytes) and synced: every byte crosses the
    cgroup's write throttle, as a save to a slow volume does. Returns the bytes written."""
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getbuffer()
    block = mmap.mmap(-1, 1 << 20)  # page-aligned, as O_DIRECT wants
    flags = os.O_WRONLY | os.O_DIRECT | (0 if path.is_block_device() else os.O_CREAT)
    fd = os.open(path, flags, 0o644)
    try:
        off = 0
        while off < len(data):
            n = min(len(block), len(data) - off)
            block[:n] = data[off : off + n]
            aligned = -(-n // ALIGN) * ALIGN
            os.pwrite(fd, memoryview(block)[:aligned], off % max(wrap - len(block), ALIGN))
            off += n
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(data)


def launch_bound(args: argparse.Namespace, phase, end: float) -> None:
    """Thousands of tiny ops a step, each its own dispatch from the main thread: on a GPU each would
    be a kernel of microseconds that the host cannot launch faster (no process group, no peer)."""
    x = torch.ones(256)
    while time.monotonic() < end:
        phase("small")
        for _ in range(jittered(args.ops)):
            x = x * 1.0001 + 1e-4
        x = x / x.norm()
        phase("compute")  # the optimizer step: a few larger kernels
        time.sleep(args.gpu_seconds * random.uniform(0.6, 1.4))


def pageable_copies(args: argparse.Namespace, gpus: LabGpus, phase, end: float) -> None:
    """Each step copies ``--copy-bytes`` of pageable host memory to the "device" (a tensor standing
    for it) while the GPUs wait, then computes for as long as makes that step's copies
    ``--copy-share`` of it (sized on the copy just made: a box's copies run at its own speed)."""
    src = torch.rand(args.copy_bytes // 4)  # pageable: never pinned
    dst = torch.zeros_like(src)  # touched: the first copy must not pay the page faults alone
    chunks = 8
    n = src.numel() // chunks
    while time.monotonic() < end:
        phase("starved")
        began = time.monotonic()
        for k in range(chunks):
            dst[k * n : (k + 1) * n].copy_(src[k * n : (k + 1) * n])
            gpus.received(n * 4)
        copied = time.monotonic() - began
        phase("compute")
        time.sleep(copied * (1.0 - args.copy_share) / args.copy_share * random.uniform(0.6, 1.4))


def batch_for(args: argparse.Namespace) -> int:
    """``--batch``, or as many images as ``--decode-seconds`` of CPU decode (measured here, on a few)."""
    if not args.decode_seconds:
        return args.batch
    ds = JpegFolder(Path(args.images))
    ds[0]  # Pillow's first decode loads its plugins
    start = time.thread_time()
    for i in range(8):
        ds[i]
    per = (time.thread_time() - start) / 8
    return max(1, round(args.decode_seconds / per))


def jittered(mean: int) -> int:
    """A batch of ``mean`` images or objects, +-40%: a fixed step near the agent's 1 s sample would
    alias with it (a 1.0 s step sampled every 1 s shows the same phase for tens of samples)."""
    return max(1, round(mean * random.uniform(0.6, 1.4)))


class JitteredBatches(Sampler[list[int]]):
    def __init__(self, mean: int) -> None:
        self.mean = mean

    def __iter__(self) -> Iterator[list[int]]:
        k = 0
        while True:
            n = jittered(self.mean)
            yield list(range(k, k + n))
            k += n


def batches(args: argparse.Namespace):
    if args.mode in ("dist", "compute"):
        while True:
            yield torch.randint(0, 255, (args.batch, 3, 32, 32), dtype=torch.uint8)
    if args.mode == "pool":
        import multiprocessing as mp

        # a synchronous map per batch: the one worker decodes while the training process waits
        with mp.get_context("fork").Pool(1) as pool:
            k = 0
            while True:
                n = jittered(args.batch)
                (data,) = pool.map(decode_batch, [(args.images, k, n)])
                k += n
                yield as_images(data, n)
    if args.mode == "jpeg":
        ds: Dataset = JpegFolder(Path(args.images))
    elif args.mode == "stream":
        ds = StreamedObjects(args.server, args.object_bytes)
    else:
        ds = DirectSamples(args.data, args.data_size, args.sample_bytes)
    if args.decode_seconds or args.mode == "stream":  # the jobs of issue 23, for 1 s samples
        loader = DataLoader(ds, batch_sampler=JitteredBatches(args.batch), num_workers=args.workers)
    else:
        loader = DataLoader(ds, batch_size=args.batch, num_workers=args.workers, shuffle=False)
    yield from loader


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="a real PyTorch job for the classifier lab")
    ap.add_argument(
        "--mode",
        choices=("jpeg", "pool", "direct", "stream", "dist", "compute", "launch", "copy"),
        required=True,
    )
    ap.add_argument("--regime", required=True, help="what the lab says limits this job (the truth)")
    ap.add_argument("--gpu-state", required=True)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--phase-log", required=True)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--gpu-seconds", type=float, default=0.02, help="GPU time per step, mean")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--images", help="folder of .jpg files (jpeg, pool)")
    ap.add_argument(
        "--decode-seconds",
        type=float,
        default=0.0,
        help="size the batch to this much CPU decode (jpeg, pool)",
    )
    ap.add_argument("--server", help="HOST:PORT of lab.objserver (stream)")
    ap.add_argument("--object-bytes", type=int, default=1 << 20, help="bytes per object (stream)")
    ap.add_argument("--data", help="file or device (direct)")
    ap.add_argument("--data-size", type=int, default=64 << 20)
    ap.add_argument("--sample-bytes", type=int, default=128 << 10)
    ap.add_argument("--elems", type=int, default=1 << 20, help="float32 elements all-reduced per step")
    ap.add_argument("--straggle", type=float, default=0.0, help="extra seconds per step on rank 1")
    ap.add_argument("--save-every", type=float, default=0.0, help="seconds between saves (compute)")
    ap.add_argument("--save-bytes", type=int, default=64 << 20, help="bytes of state each save writes")
    ap.add_argument("--checkpoint-dir", help="where the saves go (compute)")
    ap.add_argument("--save-direct", help="write each save with O_DIRECT to this file or device (compute)")
    ap.add_argument("--ops", type=int, default=5000, help="tiny ops dispatched a step (launch)")
    ap.add_argument("--copy-bytes", type=int, default=256 << 20, help="pageable bytes copied a step (copy)")
    ap.add_argument("--copy-share", type=float, default=0.5, help="of a step, the copies' share (copy)")
    ap.add_argument(
        "--save-share",
        type=float,
        default=0.0,
        help="compute between saves for as long as makes each save this share of the time (compute)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # the "GPU" work is simulated; keep the CPU for the input pipeline
    args.batch = batch_for(args)
    dist = args.mode == "dist"
    rank = 0
    if dist:
        import torch.distributed as tdist

        tdist.init_process_group("gloo")
        rank = tdist.get_rank()
    gpus = LabGpus(Path(args.gpu_state), gpus=args.gpus)
    log = PhaseLog(Path(args.phase_log))
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    bucket = torch.zeros(args.elems)
    pid = os.getpid()
    current = ""

    def phase(name: str) -> None:
        nonlocal current
        if name != current:
            gpus.phase(name, pid)
            log.write(phase=name, regime=args.regime)
            current = name

    def step(x: torch.Tensor) -> None:
        # a strided view to 32x32 first: the training process's own CPU work stays small, so its
        # "GPU" phase does not compete with the data-loader workers it is measured against
        stride = max(1, x.shape[-1] // 32)
        x = F.adaptive_avg_pool2d(x[:, :, ::stride, ::stride].float() / 255.0, 32)
        loss = F.cross_entropy(model(x), torch.zeros(x.shape[0], dtype=torch.long))
        opt.zero_grad()
        loss.backward()
        opt.step()

    # torch's first autograd step costs a second here: on a GPU node that is the CUDA/cuDNN warm-up
    # before the job shows on the GPUs; the lab's job starts when it does
    step(torch.zeros(args.batch, 3, 32, 32, dtype=torch.uint8))
    state = {"weights": torch.randn(args.save_bytes // 4)} if args.save_direct else {}
    log.write(regime=args.regime, seconds=args.seconds, batch=args.batch)
    end = time.monotonic() + args.seconds
    saved_at = time.monotonic()
    finished = False
    if args.mode in ("launch", "copy"):
        try:
            if args.mode == "launch":
                launch_bound(args, phase, end)
            else:
                pageable_copies(args, gpus, phase, end)
            finished = True
        finally:
            gpus.phase("idle", None)
            log.write(phase="idle", regime="end", finished=finished)
            log.close()
        return 0
    it = batches(args)
    try:
        while True:
            phase("starved")
            x = next(it)
            phase("compute")
            step(x)
            time.sleep(args.gpu_seconds * random.uniform(0.6, 1.4) + (args.straggle if rank == 1 else 0.0))
            if dist:
                phase("spin")
                bucket.fill_(0.0)
                bucket[-1] = 1.0 if rank == 0 and time.monotonic() >= end else 0.0
                tdist.all_reduce(bucket)
                if bucket[-1].item() > 0:
                    break
            elif time.monotonic() >= end:
                break
            if args.save_every and time.monotonic() - saved_at >= args.save_every:
                phase("starved")  # a synchronous save: the GPUs idle until the state is on disk
                began = time.monotonic()
                log.write(save="begin")
                if args.save_direct:
                    save_direct(Path(args.save_direct), state, args.data_size)
                else:
                    save(Path(args.checkpoint_dir), args.save_bytes)
                log.write(save="end")
                took = time.monotonic() - began
                if args.save_share:  # a volume's real speed: the next interval keeps the drawn share
                    args.save_every = max(1.0, took * (1.0 - args.save_share) / args.save_share)
                saved_at = time.monotonic()
        finished = True
    finally:
        gpus.phase("idle", None)
        log.write(phase="idle", regime="end", finished=finished)
        log.close()
        if dist:
            # both ranks past their last collective before either tears its group down: one that
            # goes first can fail the other's last operation (examples/accelerate_train.py had that
            # teardown abort in CI; a later CI run lost this job's rank 0, its cause not shown)
            if finished:
                tdist.barrier()
            tdist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
