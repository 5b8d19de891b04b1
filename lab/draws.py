"""Randomized lab scenarios drawn from a seed, so the classifier cannot be tuned to one example (pure).

Each seed picks a family (round robin) and its parameters: data-loader workers 0..4 and how costly a
batch is to decode, allowed cores with or without a cpuset, the shaped link's rate against the 10 Gb/s
the veth reports, step times and batch or gradient sizes, how many GPUs, and background noise (a
neighbour reading the disk, a busy process outside the job). The parameters are bounded so that
the family really is what limits the job (a CPU-bound draw decodes slower than its GPUs compute,
a network-bound one moves its gradients for longer than it computes): the truth is the family.

Thresholds were tuned on ``TUNE_SEEDS`` only; ``HELD_OUT_SEEDS`` were run once tuning was over.

The input families came later (issue 23): input streamed over HTTP from an object server behind the
shaped link (``network-input``), and ``num_workers=0`` decoding whose host sleeps while the GPUs work
(``cpu-inline``, the trainer's ``cpu`` regime). They are drawn from seeds of their own
(``INPUT_TUNE_SEEDS``, ``INPUT_HELD_OUT_SEEDS``), so every older seed draws what it always drew and
the older matrices compare like for like.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

FAMILIES = ("compute", "storage", "cpu", "network", "sync-wait")
TUNE_SEEDS = tuple(range(100, 140))
HELD_OUT_SEEDS = tuple(range(9000, 9100))
INPUT_FAMILIES = ("network-input", "cpu-inline")
INPUT_TUNE_SEEDS = tuple(range(200, 240))
INPUT_HELD_OUT_SEEDS = tuple(range(9500, 9600))
REGIME = {"cpu-inline": "cpu"}  # a family the trainer runs as another's regime, with other parameters
MIB = 1 << 20
# How each fake GPU keeps its readings where NVIDIA's sources leave it open (docs/fake-nvml.md):
# the utilization period ("between 1 second and 1/6 second depending on the product", which product
# not said), the sample buffer's depth and its timestamps' clock (undocumented). A lab run draws them
# per GPU from one seed (lab.harness.readings_seed)
# Issue 32, item 4: steps (a job's cycle of input or exchange, then compute) of 0.1-2 s, shorter and
# longer than the agent's 1 s sample, for an agent at its default settings (1 s samples, 60 s window):
# the draws above are scaled to the lab's 1.2 s window, which cannot hold a 2 s cycle twice. From
# seeds of their own (``long_step_draw``); make lab runs TNA_LAB_LONG_DRAWS of them
LONG_TUNE_SEEDS = tuple(range(300, 340))
LONG_HELD_OUT_SEEDS = tuple(range(9700, 9800))
CYCLE_SECONDS = (0.1, 2.0)
# Issue 48: the GPUs work 30-70% of each 0.1-2 s cycle and lose the rest to one cause, which must be
# named, never "mixed" (``duty_draw``), from seeds of their own; make lab runs TNA_LAB_DUTY_DRAWS
DUTY_FAMILIES = ("storage", "cpu", "network-input", "network")
DUTY_TUNE_SEEDS = tuple(range(600, 640))
DUTY_HELD_OUT_SEEDS = tuple(range(9900, 10000))
LONG_SECONDS = 45.0  # the default 20 s warm-up, a verdict within 30 s of the start, and then some
UTILIZATION_PERIODS = (1 / 6, 1.0)  # seconds
BUFFER_DEPTHS = (20, 120)  # samples: >= 3 s at the shortest period, so a 1 s drain never loses one
SAMPLE_CLOCKS = ("realtime", "boottime", "monotonic")


@dataclass(frozen=True)
class Draw:
    seed: int
    family: str  # the trainer regime, and so the truth
    seconds: float
    args: dict[str, float | int] = field(default_factory=dict)  # lab.trainer options
    cpuset: int | None = None  # cores of the trainer's cpuset; None: no cpuset at all
    link_mbit: int | None = None  # tc rate of the peer link (network, sync-wait)
    read_bps: int | None = None  # the cgroup's read throttle (storage)
    noise: str | None = None  # "disk" | "cpu" | None

    @property
    def regime(self) -> str:
        """The trainer's regime (its truth label is ``lab.scoring.TRUTH[regime]``)."""
        return REGIME.get(self.family, self.family)

    @property
    def name(self) -> str:
        return f"{self.family}#{self.seed}"

    def describe(self) -> str:
        parts = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(self.args.items())]
        if self.cpuset is not None:
            parts.append(f"cpuset={self.cpuset}")
        if self.link_mbit:
            parts.append(f"link={self.link_mbit}mbit")
        if self.read_bps:
            parts.append(f"read={self.read_bps / MIB:.0f}MiB/s")
        parts.append(f"noise={self.noise or '-'}")
        return " ".join(parts)


def draw(seed: int, cpus: int) -> Draw:
    """The scenario for ``seed`` on a host with ``cpus`` CPUs."""
    if seed in INPUT_TUNE_SEEDS or seed in INPUT_HELD_OUT_SEEDS:
        return _input_draw(seed, cpus)
    rnd = random.Random(seed)
    family = FAMILIES[seed % len(FAMILIES)]
    gpus = rnd.choice((1, 2, 2, 4, 8))
    noise = rnd.choice((None, None, "disk", "cpu"))
    seconds = 10.0
    if family == "compute":
        return Draw(seed, family, seconds, {"gpus": gpus, "step": rnd.uniform(0.08, 0.4)}, noise=noise)
    if family == "storage":
        read_bps = rnd.choice((4, 6, 8, 12)) * MIB
        batch = rnd.randint(1, 6) * MIB
        # the GPUs compute for less than a third of the time a batch takes to arrive
        compute = rnd.uniform(0.02, min(0.15, 0.3 * batch / read_bps))
        args = {"gpus": gpus, "batch-bytes": batch, "compute-step": compute}
        return Draw(seed, family, seconds, args, read_bps=read_bps, noise=noise)
    if family == "cpu":
        workers, cpuset, parallel = _decoders(rnd, cpus, noise)
        decode = rnd.uniform(0.15, 0.5)
        compute = rnd.uniform(0.02, 0.3 * decode / parallel)
        args = {"gpus": gpus, "workers": workers, "decode-seconds": decode, "compute-step": compute}
        return Draw(seed, family, seconds, args, cpuset=cpuset, noise=noise)
    if family == "network":
        mbit = rnd.choice((20, 30, 50, 80, 120))
        compute = rnd.uniform(0.03, 0.15)
        # the exchange (each way) takes at least two and a half times the compute
        low = max(1 * MIB, int(2.5 * compute * mbit * 1e6 / 8))
        grad = rnd.randint(low, max(low, 5 * MIB))
        args = {"gpus": gpus, "grad-bytes": grad, "compute-step": compute}
        return Draw(seed, family, seconds, args, link_mbit=mbit, noise=noise)
    mbit = rnd.choice((50, 80, 200))
    args = {
        "gpus": gpus,
        "straggle": rnd.uniform(0.2, 0.6),
        "sync-bytes": rnd.randint(4, 64) << 10,
        "compute-step": rnd.uniform(0.03, 0.12),
    }
    return Draw(seed, family, seconds, args, link_mbit=mbit, noise=noise)


def _decoders(rnd: random.Random, cpus: int, noise: str | None) -> tuple[int, int | None, int]:
    """A CPU-bound draw's data-loader workers (0-4), its cpuset (None: none), and how many decoders
    run at once: the workers (or the trainer itself), as far as the cores left to them allow."""
    workers = rnd.randint(0, 4)
    cpuset = rnd.choice((None, None, 1, 2)) if cpus > 1 else None
    if cpuset is not None:
        cpuset = min(cpuset, cpus - 1)
    cores = cpuset or cpus
    if noise == "cpu":
        cores = max(1, cores - 1)
    return workers, cpuset, min(max(workers, 1), cores)


@dataclass(frozen=True)
class CycleDraws:
    """One kind of draw whose step is a cycle of 0.1-2 s (``cycle_draw``): what sets it apart is
    data, so every kind draws its families' cycles the same way."""

    stream: str  # a seed's random stream is ``f"{stream}-{seed}"``: each kind's seeds draw their own
    families: tuple[str, ...]  # the seed picks one, round robin
    compute_share: tuple[float, float]  # the GPUs compute this share of each cycle, the rest waits
    # storage holds the drawn share at the throttle's real pace (lab.trainer --compute-share), where
    # the share is the point rather than the cycle
    paced: bool = False


# every family of FAMILIES, the GPUs computing 10-30% of the cycle (all of it, for compute)
LONG_STEP = CycleDraws("long", FAMILIES, (0.1, 0.3))
# DUTY_FAMILIES, the GPUs computing 30-70% of it; the cpu family decodes in the training process
DUTY = CycleDraws(
    "duty", tuple("cpu-inline" if f == "cpu" else f for f in DUTY_FAMILIES), (0.3, 0.7), paced=True
)


def cycle_draw(seed: int, cpus: int, kind: CycleDraws, family: str | None = None) -> Draw:
    """A draw of one of ``kind``'s families whose GPUs compute ``kind.compute_share`` of a 0.1-2 s
    cycle and lose the rest to the family's cause: a read, a decode (by the workers, or in the
    training process for cpu-inline) or an exchange before each step (the rest of the cycle), a
    straggler at the sync, or input streamed by one worker that runs ahead (its transfer is the
    cycle), so the family is still what limits the job. ``family``: one of ``kind.families`` the
    caller picked (by default the seed picks, round robin)."""
    rnd = random.Random(f"{kind.stream}-{seed}")
    family = family or kind.families[seed % len(kind.families)]
    gpus = rnd.choice((1, 2, 2, 4, 8))
    noise = rnd.choice((None, None, "disk", "cpu"))
    cycle = rnd.uniform(*CYCLE_SECONDS)
    compute = cycle * rnd.uniform(*kind.compute_share)
    wait = cycle - compute
    if family == "compute":
        return Draw(seed, family, LONG_SECONDS, {"gpus": gpus, "step": cycle}, noise=noise)
    if family == "storage":
        read_bps = rnd.choice((4, 6, 8, 12)) * MIB
        args = {"gpus": gpus, "batch-bytes": max(64 << 10, int(wait * read_bps)), "compute-step": compute}
        if kind.paced:
            args["compute-share"] = round(compute / cycle, 3)
        return Draw(seed, family, LONG_SECONDS, args, read_bps=read_bps, noise=noise)
    if family == "cpu":
        workers, cpuset, parallel = _decoders(rnd, cpus, noise)
        # a batch every cycle: the decoders running at once each take ``parallel`` cycles' CPU
        decode = wait if workers == 0 else cycle * parallel
        args = {"gpus": gpus, "workers": workers, "decode-seconds": decode, "compute-step": compute}
        return Draw(seed, family, LONG_SECONDS, args, cpuset=cpuset, noise=noise)
    if family == "cpu-inline":
        args = {"gpus": gpus, "workers": 0, "decode-seconds": wait, "compute-step": compute}
        return Draw(seed, family, LONG_SECONDS, args, noise=noise)
    if family == "network-input":
        mbit = rnd.choice((20, 30, 50, 80))
        obj = 256 << 10
        objects = max(1, round(cycle * mbit * 1e6 / 8 / obj))
        compute = objects * obj * 8 / (mbit * 1e6) * (compute / cycle)
        args = {"gpus": gpus, "workers": 1, "objects": objects, "object-bytes": obj, "compute-step": compute}
        return Draw(seed, family, LONG_SECONDS, args, link_mbit=mbit, noise=noise)
    if family == "network":
        mbit = rnd.choice((20, 30, 50, 80, 120))
        args = {
            "gpus": gpus,
            "grad-bytes": max(64 << 10, int(wait * mbit * 1e6 / 8)),
            "compute-step": compute,
        }
        return Draw(seed, family, LONG_SECONDS, args, link_mbit=mbit, noise=noise)
    if family == "sync-wait":
        mbit = rnd.choice((50, 80, 200))
        args = {
            "gpus": gpus,
            "straggle": wait,
            "sync-bytes": rnd.randint(4, 64) << 10,
            "compute-step": compute,
        }
        return Draw(seed, family, LONG_SECONDS, args, link_mbit=mbit, noise=noise)
    raise ValueError(f"no cycle draw for the family {family!r}")


def long_step_draw(seed: int, cpus: int) -> Draw:
    """A draw of ``FAMILIES`` whose step cycle is 0.1-2 s: the GPUs compute for 10-30% of it (all of
    it, for compute) and wait for the rest, on input or on the exchange."""
    return cycle_draw(seed, cpus, LONG_STEP)


def duty_draw(seed: int, cpus: int) -> Draw:
    """A draw of ``DUTY_FAMILIES`` whose GPUs compute 30-70% of each 0.1-2 s cycle and lose the rest
    to the family's cause (the cpu family as ``cpu-inline``: decoded in the training process)."""
    return cycle_draw(seed, cpus, DUTY)


def gpu_readings(seed: int, gpus: int = 8) -> tuple[dict[str, float | int | str], ...]:
    """Each GPU's utilization period (the buffer takes one sample a period, as the fake's products
    do), buffer depth and timestamp clock, in the fake's state keys. Per GPU, not per draw: a real
    GPU's stay what they are for as long as the agent watches it."""
    rnd = random.Random(f"readings-{seed}")
    out = []
    for _ in range(gpus):
        period = round(rnd.uniform(*UTILIZATION_PERIODS), 3)
        out.append(
            {
                "utilization_average_seconds": period,
                "sample_period_seconds": period,
                "sample_buffer_depth": rnd.randint(*BUFFER_DEPTHS),
                "sample_clock": rnd.choice(SAMPLE_CLOCKS),
            }
        )
    return tuple(out)


def _input_draw(seed: int, cpus: int) -> Draw:
    rnd = random.Random(seed)
    family = INPUT_FAMILIES[seed % len(INPUT_FAMILIES)]
    gpus = rnd.choice((1, 2, 2, 4, 8))
    noise = rnd.choice((None, None, "disk", "cpu"))
    seconds = 10.0
    if family == "network-input":
        mbit = rnd.choice((20, 30, 50, 80))
        obj = rnd.choice((256 << 10, 512 << 10, MIB, 2 * MIB))
        # a batch takes 0.3-1.2 s on the link (at least one object), whatever the workers: they share it
        objects = max(1, round(rnd.uniform(0.3, 1.2) * mbit * 1e6 / 8 / obj))
        transfer = objects * obj * 8 / (mbit * 1e6)
        # the GPUs compute for less than a third of it, so they starve >= 70% of the time
        compute = rnd.uniform(0.02, 0.3 * transfer)
        args = {
            "gpus": gpus,
            "workers": rnd.randint(1, 4),
            "objects": objects,
            "object-bytes": obj,
            "compute-step": compute,
        }
        return Draw(seed, family, seconds, args, link_mbit=mbit, noise=noise)
    # num_workers=0: the training process decodes for 0.15-0.45 CPU seconds, then sleeps through the
    # GPUs' step (a blocking CUDA sync), which is at most half the decode: starved >= 2/3 of the time.
    # Scaled to the lab's 1.2 s window, which must hold two steps (0.5-1.2 s decodes made one window
    # a single step and its shares swing 40-80%, wrong in a clean-clone run); the 0.9 s one
    # is the real PyTorch job at default settings (lab/torchlab.py)
    decode = rnd.uniform(0.15, 0.45)
    compute = decode * rnd.uniform(0.15, 0.5)
    cpuset = rnd.choice((None, None, 1)) if cpus > 1 else None
    args = {"gpus": gpus, "workers": 0, "decode-seconds": decode, "compute-step": compute}
    return Draw(seed, family, seconds, args, cpuset=cpuset, noise=noise)
