"""Compute-bound jobs with a second cause (issue 48), drawn from a seed (pure): the GPUs work 78-85% of
the time and lose the rest to one cause, which the verdict must name in its reasons and hint with its
share and remedy while it stays ``compute``; and compute jobs that lose nothing, which must still read
"Healthy".

The causes are what the issue names: a throttled read before each step (``storage``, paced so the
drawn share holds at the throttle's real speed), the batch decoded in the training process
(``cpu-inline``, num_workers=0), and a real PyTorch job's synchronous save every 10-20 s that holds
the GPUs 14-22% of the time (``save``). The cycle families' steps are 0.1-2 s (``lab.draws``). The
lost share is drawn well above the 10% a cause must cost to be named, and below the cause floor (28%,
where a cause outvotes the work) by more than the box and the readings add: held-out 9801, drawn at
75% work, lost 26% by its own log, read 28% and was named the cause, so the truth is never in doubt.

Tuned on ``TUNE_SEEDS``; ``make lab`` reports on ``HELD_OUT_SEEDS``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from lab.draws import CycleDraws, cycle_draw
from lab.harness import Scenario, from_draw
from lab.hostdraws import NAMED_WITHIN, save_job

FAMILIES = ("storage", "cpu-inline", "save", "compute")
CAUSE = {"storage": "data/storage", "cpu-inline": "data/cpu", "save": "host/checkpoint", "compute": None}
# a phrase of each cause's remedy in the hint (agent/classifier/hints.py, shapes/checkpoint.py)
REMEDY = {
    "data/storage": "stage the dataset",
    "data/cpu": "Input is CPU-bound",
    "host/checkpoint": "async_save",
}
TUNE_SEEDS = tuple(range(700, 740))
HELD_OUT_SEEDS = tuple(range(9800, 9900))
SECOND = CycleDraws("second", ("storage", "cpu-inline", "compute"), (0.78, 0.85), paced=True)
SAVE_SECONDS = 80.0  # a save every 10-20 s


@dataclass(frozen=True)
class SecondDraw:
    seed: int
    family: str
    scenario: Scenario
    detail: str

    @property
    def cause(self) -> str | None:
        return CAUSE[self.family]

    @property
    def name(self) -> str:
        return self.scenario.name


def second_draw(seed: int, cpus: int) -> SecondDraw:
    family = FAMILIES[seed % len(FAMILIES)]
    if family == "save":
        return _save_draw(seed, family)
    d = cycle_draw(seed, cpus, SECOND, family)
    name = f"second {family}#{seed}"
    sc = replace(from_draw(d), name=name, defaults=True, truth={d.regime: "compute"})
    return SecondDraw(seed, family, sc, d.describe())


def _save_draw(seed: int, family: str) -> SecondDraw:
    rnd = random.Random(f"second-save-{seed}")
    # the saves hold what the job draws (9802 drew 0.28, and its saves held 29% of the time: at the
    # cause floor, no longer a second cause), so the draw stays well under it
    args, write_bps = save_job(rnd, (0.14, 0.22))
    name = f"second {family}#{seed}"
    detail = " ".join(f"{k}={v}" for k, v in args.items() if k not in ("mode", "batch"))
    sc = Scenario(
        name,
        (("checkpoint-stall", SAVE_SECONDS),),
        args=args,
        torch="compute",
        defaults=True,
        write_bps=write_bps,
        family=family,
        truth={"checkpoint-stall": "compute"},
        named_within=NAMED_WITHIN["checkpoint-stall"],
    )
    return SecondDraw(seed, family, sc, detail)
