"""The advice's lab (issue 45), drawn from a seed (pure): a real PyTorch job of one family run twice,
on card A and on card B, two fake products of the catalog, with the job's simulated GPU work on B
stretched by the catalog's ratio for the job's own tensor:DRAM mix (what the estimate assumes) and
everything else unchanged; the step time each run took, from the job's own phase log.

A seed picks the family round robin and draws what the estimate reads: the GPU work a step, the
tensor:DRAM mix the GPUs show while working, and the family's other part of the step:

- ``compute``: synthetic batches, only the GPU work;
- ``data``: JPEGs decoded in the training process (``--workers 0``: the decode and the GPU work take
  turns, so the wait is the same on either card; reads through the lab's read throttle were tried
  and took 0.07-0.1 s longer a step beside the longer GPU work on card B: the throttle's doing);
- ``network``: an all-reduce of 1-4 MB over gloo between two ranks across the capped veth;
- ``sync-wait``: a small all-reduce, rank 1 late by a drawn straggle every step.

Tuned on ``TUNE_SEEDS``; the suite and ``make lab`` report on ``HELD_OUT_SEEDS`` (the first is a
compute draw: the suite's one pair).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from agent.advice.catalog import Catalog

FAMILIES = ("compute", "data", "network", "sync-wait")
REGIME = {"compute": "compute", "data": "cpu", "network": "network", "sync-wait": "sync-wait"}
CARDS = ("H20", "L20")  # fake_nvml PRODUCTS keys, also the catalog's card names
TUNE_SEEDS = tuple(range(4560, 4580))
HELD_OUT_SEEDS = tuple(range(9552, 9612))
SECONDS = 14.0
SKIP = 3.0  # seconds from the job's start before steps count (the first steps, the agent's warm-up)
KIB = 1 << 10


@dataclass(frozen=True)
class AdviceDraw:
    seed: int
    family: str
    gpu_seconds: float  # on card A, a step's mean
    tensor: float  # percent, while the GPUs work
    dram: float
    args: dict[str, Any] = field(default_factory=dict)  # lab/torchjob.py options but --gpu-seconds
    link_mbit: int = 80
    card_a: str = CARDS[0]
    card_b: str = CARDS[1]

    @property
    def name(self) -> str:
        knobs = " ".join(f"{k}={v}" for k, v in self.args.items() if k not in ("mode", "batch"))
        return (
            f"advice {self.family} #{self.seed} (gpu {self.gpu_seconds:g} s, tensor {self.tensor:.0f}%"
            f" dram {self.dram:.0f}%{' ' + knobs if knobs else ''})"
        )

    @property
    def work(self) -> dict[str, float]:
        """The fake's compute-phase fields: the drawn mix (GPM, on the GPUs that have it)."""
        return {"tensor_active": self.tensor, "dram_active": self.dram}


def advice_draw(seed: int) -> AdviceDraw:
    rnd = random.Random(seed)
    family = FAMILIES[seed % len(FAMILIES)]
    tensor = round(rnd.uniform(20.0, 70.0), 1)
    dram = round(rnd.uniform(15.0, 60.0), 1)
    link = 80
    if family == "compute":
        gpu = round(rnd.uniform(0.15, 0.45), 3)
        args: dict[str, Any] = {"mode": "compute", "batch": 16}
    elif family == "data":
        gpu = round(rnd.uniform(0.05, 0.25), 3)
        # a batch of JPEGs decoded in the training process, sized to this much CPU on the box it runs on
        args = {"mode": "jpeg", "workers": 0, "decode-seconds": round(rnd.uniform(0.1, 0.3), 3)}
    elif family == "network":
        gpu = round(rnd.uniform(0.05, 0.25), 3)
        link = rnd.randint(40, 80)
        args = {"mode": "dist", "elems": rnd.randint(256, 1024) * KIB}  # 1-4 MB of float32
    else:
        gpu = round(rnd.uniform(0.05, 0.25), 3)
        link = 50
        args = {"mode": "dist", "elems": 4096, "straggle": round(rnd.uniform(0.2, 0.6), 2)}
    return AdviceDraw(seed, family, gpu, tensor, dram, args, link)


def card_ratio(catalog: Catalog, a: str, b: str, tensor: float, dram: float) -> float:
    """GPU work on ``b`` over the same on ``a``: the tensor-TFLOPS ratio and the bandwidth ratio
    weighted by the job's tensor:DRAM activity (the estimate's own assumption, at its centre)."""
    ca, cb = catalog.cards[a], catalog.cards[b]
    w = tensor / (tensor + dram)
    return w * ca.tensor_tflops / cb.tensor_tflops + (1 - w) * ca.bandwidth_gbs / cb.bandwidth_gbs


def gpu_seconds_on(d: AdviceDraw, card: str, catalog: Catalog) -> float:
    """The job's simulated GPU work a step on ``card``: card A's, stretched by the ratio on B."""
    if card == d.card_a:
        return d.gpu_seconds
    return round(d.gpu_seconds * card_ratio(catalog, d.card_a, card, d.tensor, d.dram), 4)


def step_seconds(lines: list[dict[str, Any]], skip: float = SKIP) -> tuple[float, int]:
    """The job's mean step time and how many steps it is over, from its phase log: a step begins
    where the job turns to wait for its next batch (``starved``); those ``skip`` seconds or more
    after its first regime line count, up to the last."""
    start = next((x["wall"] for x in lines if "seconds" in x), None)
    if start is None:
        raise ValueError("the phase log has no start line (the job never began its steps)")
    begins = [x["wall"] for x in lines if x.get("phase") == "starved" and x["wall"] >= start + skip]
    if len(begins) < 3:
        raise ValueError(f"only {len(begins)} steps after the first {skip:g} s: too few to time a step")
    return (begins[-1] - begins[0]) / (len(begins) - 1), len(begins) - 1
