"""The slow GPU inside a node (issue 34, 2): one GPU of a lockstep job works while its peers spin in
collectives waiting for it. The verdict names it with its clocks event reasons, its cause word is
``degraded-gpu`` (the fleet's straggler rule reads it), and the hint says what to do; GPUs in step,
or out of step with each other, name none."""

from __future__ import annotations

import random
import re

import pytest
from classifier_synth import COMPUTE, SYNC, Run, fast_cfg, like, run

from agent.classifier.cause import cause
from agent.classifier.engine import Engine
from agent.core.vocabulary import Verdict, VerdictReason
from agent.sources.gpu.reasons import ClockReason

LOCKSTEP = like(COMPUTE, phases=("work", "work", "spin"), gpus=8, seconds=90)  # peers wait 33%
CFG = fast_cfg(window="30s")  # a GPU is judged on 20 samples at least (slowgpu.MIN_SAMPLES)


def named(r: Run) -> list[tuple[int, ...]]:
    return [tuple(x.gpu for x in e.current.features.slow_gpus) for e in r.evaluations if e.current]


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        (ClockReason.HW_SLOWDOWN, "hardware slowdown 100% of the time"),
        (ClockReason.HW_THERMAL_SLOWDOWN, "thermal throttling (hardware) 100% of the time"),
        (ClockReason.SW_POWER_CAP, "at its power cap 100% of the time"),
    ],
)
def test_the_throttled_gpu_is_named_with_its_reason(reason: ClockReason, words: str) -> None:
    gpu = random.Random(int(reason)).randrange(8)
    r = run(like(LOCKSTEP, slow=(gpu,), slow_throttle=int(reason), slow_clock=1.245e9), cfg=CFG)
    v = r.engine.current
    assert v is not None and v.verdict in (Verdict.COMPUTE, Verdict.SYNC_WAIT), r.verdicts()
    assert named(r)[-1] == (gpu,)
    line = next(x for x in v.reasons if x.startswith(f"GPU {gpu} works"))
    m = re.fullmatch(
        rf"GPU {gpu} works (\d+)% of the time while its 7 peers work (\d+)% and wait for it (\d+)% "
        rf"\(spinning in collectives\); GPU {gpu} at 1245 of 1980 MHz, {re.escape(words)}",
        line,
    )
    assert m, line
    work, peers_work, peers_wait = map(int, m.groups())
    assert work == 97 and 63 <= peers_work <= 70 and 30 <= peers_wait <= 37, line  # 1 sample in 3
    assert cause(v) is VerdictReason.DEGRADED_GPU
    assert v.hint.startswith(f"GPU {gpu} sets the pace"), v.hint
    held = named(r)[10:]  # once the window holds 20 samples
    assert sum(x == (gpu,) for x in held) / len(held) >= 0.9, held


def test_one_slow_gpu_of_four_whose_peers_wait_two_thirds_is_not_mixed() -> None:
    """The split between its work (compute) and its peers' wait (sync-wait) is the slow GPU itself:
    the vote read mixed/unclear here (a live fleet test's node-b, 3.4x slow), so the straggler rule
    never saw degraded-gpu. Now the leader of the two stands, with the GPU named."""
    slow = like(COMPUTE, phases=("work", "spin", "spin"), gpus=4, seconds=90, slow=(1,))
    r = run(like(slow, slow_throttle=int(ClockReason.HW_THERMAL_SLOWDOWN), slow_clock=0.6e9), cfg=CFG)
    judged = [e.current for e in r.evaluations if e.current][10:]  # once the window holds 20 samples
    assert all(v.verdict != Verdict.MIXED for v in judged), r.verdicts()
    assert sum(cause(v) is VerdictReason.DEGRADED_GPU for v in judged) / len(judged) >= 0.9
    assert r.engine.current.hint.startswith("GPU 1 sets the pace")


def test_a_slow_gpu_with_no_reason_points_at_its_links_and_limit() -> None:
    r = run(like(LOCKSTEP, slow=(2,)), cfg=CFG)
    line = next(x for x in r.engine.current.reasons if x.startswith("GPU 2 works"))
    assert line.endswith(
        "GPU 2 at 1980 of 1980 MHz: no clocks event reason: "
        "check its PCIe link, power limit and NVLink (status)"
    ), line


def test_two_slow_gpus_are_both_named() -> None:
    r = run(like(LOCKSTEP, slow=(1, 6), slow_throttle=int(ClockReason.HW_SLOWDOWN)), cfg=CFG)
    assert named(r)[-1] == (1, 6)
    assert r.engine.current.hint.startswith("GPUs 1, 6 set the pace")


@pytest.mark.parametrize("regime", [LOCKSTEP, like(SYNC, gpus=8, seconds=60), like(COMPUTE, gpus=8)])
def test_gpus_in_step_name_none(regime) -> None:
    r = run(regime, cfg=CFG)
    assert not any(named(r)), named(r)
    assert cause(r.engine.current) is not VerdictReason.DEGRADED_GPU


def test_gpus_out_of_step_with_each_other_name_none() -> None:
    """Per-GPU phases drawn at random (no lockstep), over the default 60 s window: a GPU that happens
    to work more than the others in a window is not one the others wait for."""
    rnd = random.Random(7)
    engine = Engine(fast_cfg(window="60s"))
    r = Run(engine)
    for _ in range(300):
        # half the GPUs of each sample spin, half work: whichever GPU works most is out of step only
        slow = tuple(rnd.sample(range(8), 4))
        r.feed([like(LOCKSTEP, phases=("spin",), slow=slow, seconds=1)])
    assert not any(named(r)), [x for x in named(r) if x]
