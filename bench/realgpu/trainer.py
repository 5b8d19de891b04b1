"""A small model trained three ways, for the agent to judge: ``compute`` (batches made on the device),
``input`` (``num_workers=0``: the main process decodes JPEGs made in code, so the GPU waits on one
core), ``checkpoint`` (compute with a synchronous ``torch.save`` every few seconds).

Each step's end (time.monotonic(), shared by every process on the host) and length go to a JSON-lines
report, so the stage that started the trainer can line the steps up with what the agent said."""

from __future__ import annotations

import io
import json
import os
import random
import statistics
import time
import zlib
from pathlib import Path
from typing import Any

MODES = ("compute", "input", "checkpoint")
# the model and batches by device: on the GPU a step is some milliseconds of bf16 products; on a CPU
# (the test here) a few milliseconds of anything
SIZES = {
    "cuda": {"width": 6144, "depth": 4, "batch": 8192, "image": 224, "images": 256, "image_batch": 64},
    "cpu": {"width": 64, "depth": 2, "batch": 32, "image": 32, "images": 16, "image_batch": 8},
}
CHECKPOINT_EVERY = 5.0  # seconds


def encoded_images(count: int, side: int, seed: int = 33) -> tuple[str, list[bytes]]:
    """``count`` images of noise, JPEG-encoded with PIL where it is installed; otherwise zlib-packed
    pixels, whose decoding stands in for a JPEG's (said so in the result)."""
    rng = random.Random(seed)
    raw = [rng.randbytes(side * side * 3) for _ in range(count)]
    try:
        from PIL import Image
    except ImportError:
        return "zlib-stand-in", [zlib.compress(r, 6) for r in raw]
    out = []
    for r in raw:
        buf = io.BytesIO()
        Image.frombytes("RGB", (side, side), r).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return "pil-jpeg", out


class Images:
    """A map-style dataset decoding in ``__getitem__``: with ``num_workers=0`` that is the trainer's
    own main thread."""

    def __init__(self, torch: Any, kind: str, blobs: list[bytes], side: int) -> None:
        self.torch, self.kind, self.blobs, self.side = torch, kind, blobs, side

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        if self.kind == "pil-jpeg":
            from PIL import Image

            pixels = Image.open(io.BytesIO(self.blobs[i])).convert("RGB").tobytes()
        else:
            pixels = b""
            for _ in range(8):  # zlib inflates far faster than a JPEG decodes: do it more
                pixels = zlib.decompress(self.blobs[i])
        t = self.torch.frombuffer(bytearray(pixels), dtype=self.torch.uint8)
        return t.view(self.side, self.side, 3).permute(2, 0, 1).float().div(255), i % 10


def mlp(torch: Any, width: int, depth: int) -> Any:
    nn = torch.nn
    layers: list[Any] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def cnn(torch: Any) -> Any:
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


class StepLog:
    """JSON lines, flushed about once a second (a killed trainer loses at most that)."""

    def __init__(self, path: Path) -> None:
        self.f = open(path, "a")  # noqa: SIM115 - lives as long as the training loop
        self.flushed = time.monotonic()

    def write(self, **row: Any) -> None:
        self.f.write(json.dumps(row) + "\n")
        if time.monotonic() - self.flushed >= 1.0:
            self.f.flush()
            self.flushed = time.monotonic()

    def close(self) -> None:
        self.f.close()


def batches(torch: Any, mode: str, size: dict[str, int], device: str) -> tuple[Any, Any, str]:
    """(model, an endless batch iterator, how the inputs are made)."""
    if mode == "input":
        kind, blobs = encoded_images(size["images"], size["image"])
        data = Images(torch, kind, blobs, size["image"])
        loader = torch.utils.data.DataLoader(
            data, batch_size=size["image_batch"], shuffle=True, num_workers=0
        )

        def images() -> Any:
            while True:
                for x, y in loader:
                    yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)

        return cnn(torch).to(device), images(), kind

    def made_on_device() -> Any:
        while True:
            x = torch.randn(size["batch"], size["width"], device=device)
            yield x, torch.randint(0, 10, (size["batch"],), device=device)

    return mlp(torch, size["width"], size["depth"]).to(device), made_on_device(), "random on the device"


def train(
    mode: str, seconds: float, report: Path, device: str = "cuda", scratch: Path | None = None
) -> dict[str, Any]:
    """Train for ``seconds``; the summary of the steps (and checkpoints) it made."""
    import torch

    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
    size = SIZES["cuda" if device.startswith("cuda") else "cpu"]
    model, data, inputs = batches(torch, mode, size, device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    use_bf16 = device.startswith("cuda")
    target = Path(scratch or report.parent) / f"checkpoint-{os.getpid()}.pt"
    log = StepLog(report)
    log.write(event="start", t=time.monotonic(), mode=mode, inputs=inputs, device=device)
    steps: list[float] = []
    saves: list[float] = []
    next_save = time.monotonic() + CHECKPOINT_EVERY
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            t0 = time.monotonic()
            x, y = next(data)
            with torch.autocast("cuda" if use_bf16 else "cpu", dtype=torch.bfloat16, enabled=use_bf16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()  # the step ends when the device is done with it
            t1 = time.monotonic()
            steps.append(t1 - t0)
            log.write(end=t1, s=t1 - t0)
            if mode == "checkpoint" and t1 >= next_save:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, target)
                t2 = time.monotonic()
                saves.append(t2 - t1)
                log.write(save=t1, s=t2 - t1)
                next_save = t2 + CHECKPOINT_EVERY
    finally:
        log.close()
        target.unlink(missing_ok=True)
    return {"mode": mode, "inputs": inputs, "device": device, **step_stats(steps), "saves_s": saves}


def step_stats(steps: list[float]) -> dict[str, Any]:
    if not steps:
        return {"steps": 0}
    ordered = sorted(steps)
    return {
        "steps": len(steps),
        "step_p50_ms": 1000 * statistics.median(ordered),
        "step_p99_ms": 1000 * quantile(ordered, 0.99),
    }


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, interpolated between the two nearest ranks."""
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def read_report(path: Path) -> list[dict[str, Any]]:
    """The report's rows; a torn last line (the trainer killed mid-write) is left out."""
    rows: list[dict[str, Any]] = []
    try:
        text = path.read_text()
    except OSError:
        return rows
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows
