"""The advice's lab (issue 45's acceptance): a real PyTorch job of each family (compute, data,
network, sync-wait; ``lab.advicedraws``) runs under the real agent on two fake H20s, then again on
two fake L20s with its simulated GPU work stretched by the catalog's H20-to-L20 ratio for the job's
own tensor:DRAM mix, everything else unchanged. The step time the agent's advice predicts for the L20
(``gn8is``) from the H20 run, its range times the step the H20 run measured, must hold the step the
L20 run measured, both from the job's own phase log.

What this checks: the shares the agent measures on a real job (its ledger's buckets over the run,
its GPU figures) and the estimate's arithmetic on them, on draws from seeds it was not tuned on.
What it cannot: a card's real speed ratio on a real job (the fake's ratio is the catalog's by
construction; docs/advice.md). A fresh lab and agent for each draw: the agent keeps a job's GPU
figures for as long as it runs. ``make lab`` runs ``TNA_LAB_ADVICE_DRAWS`` pairs (``TNA_LAB_SEEDS=tune``:
the tuning seeds); the suite none: a pair is two 45 s jobs (~90 s alone), and the suite's budget has no
room for it. The suite checks the estimate's arithmetic on measured shares in test_advice_two_cards.py."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from labagent import lab_agent

from agent.advice.catalog import shipped
from lab.advicedraws import (
    HELD_OUT_SEEDS,
    REGIME,
    SECONDS,
    SKIP,
    TUNE_SEEDS,
    AdviceDraw,
    advice_draw,
    card_ratio,
    gpu_seconds_on,
    step_seconds,
)
from lab.harness import Lab, Scenario
from lab.scoring import phase_shares

pytestmark = [pytest.mark.lab, pytest.mark.root, pytest.mark.slow]
SEEDS = TUNE_SEEDS if os.environ.get("TNA_LAB_SEEDS") == "tune" else HELD_OUT_SEEDS
DRAWS = [advice_draw(s) for s in SEEDS[: int(os.environ.get("TNA_LAB_ADVICE_DRAWS") or 0)]]
CONFIG = {
    "goodput": {"resolution": "1s", "settle": "1h", "poll": "500ms"},
    "advice": {"clouds": ["alibaba"]},
}


def on_card(lab: Lab, d: AdviceDraw, card: str) -> Scenario:
    """The fake GPUs named ``card`` (the harness's and the job's), and the job for it."""
    assert lab.gpus is not None
    # a product named in the readings decides GPM for every GPU (the H20 has it, the L20 not)
    lab.readings = tuple({**r, "product": card} for r in lab.readings)
    lab.gpus.readings = lab.readings
    lab.gpu_work = d.work if card == d.card_a else {}
    lab.gpus.phase("idle")
    args = {**d.args, "gpu-seconds": gpu_seconds_on(d, card, shipped())}
    return Scenario(
        f"{d.name} on {card}",
        ((REGIME[d.family], SECONDS),),
        args=args,
        link_mbit=d.link_mbit,
        torch=str(d.args["mode"]),
    )


def log_lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _lab_step_predicted_for_card_b_holds_the_measured(tmp_path: Path, d: AdviceDraw) -> None:
    asked: list[dict] = []
    totals: list[dict] = []  # the ledger's, when asked: what it booked of the job so far
    # the agent's first look is at card A: it names the node's GPUs from what it first sees
    with lab_agent(tmp_path, CONFIG, prepare=lambda lab: on_card(lab, d, d.card_a)) as s:
        since = 0.8 * SECONDS - SKIP  # from SKIP into the job to when it is asked (80% through)

        def ask() -> None:
            asked.append(s.call("GET", f"/advice?since={since:g}"))
            totals.append(s.ledger()["totals"])

        sc_a = on_card(s.lab, d, d.card_a)
        res_a = s.lab.run(sc_a, s.history, probe=ask)
        log_a = s.lab.workdir / f"trainer-{s.lab.runs}.jsonl"
        # the same agent, its GPUs now another card: its step time is the job's own log, and what the
        # agent says of GPUs that changed under its baselines is no verdict of the classifier's
        sc_b = replace(on_card(s.lab, d, d.card_b), in_matrix=False)
        s.lab.run(sc_b, s.history)
        log_b = s.lab.workdir / f"trainer-{s.lab.runs}.jsonl"
    step_a, n_a = step_seconds(log_lines(log_a))
    step_b, n_b = step_seconds(log_lines(log_b))
    shares = phase_shares(res_a.phases, res_a.phases[0][0], res_a.phases[-1][0])
    said = ", ".join(f"{k} {v:.0%}" for k, v in sorted(shares.items()))
    assert asked, "the job ended before the agent was asked"
    step = {k: v for k, v in totals[0].items() if k not in ("no-job", "startup", "lost-to-preemption")}
    booked = ", ".join(f"{k} {v / sum(step.values()):.0%}" for k, v in sorted(step.items()) if v > 0)
    print(f"\n{d.name}: on {d.card_a} GPU phases {said}; the ledger booked {booked}")
    a = asked[0]
    assert a["instance"] is not None and a["instance"]["card"] == d.card_a, a["instance"]
    b = next(c for c in a["candidates"] if c["card"] == d.card_b and c["gpus"] == 2)
    assert b["step_ratio"] is not None, b
    lo, hi = b["step_ratio"]
    ratio = card_ratio(shipped(), d.card_a, d.card_b, d.tensor, d.dram)
    print(
        f"{d.name}: binds {a['binds']}; {d.card_a} step {step_a:.3f} s ({n_a} steps); {d.card_b}"
        f" ({b['instance']}) predicted {lo * step_a:.3f}-{hi * step_a:.3f} s ({lo:.2f}-{hi:.2f}x),"
        f" measured {step_b:.3f} s ({step_b / step_a:.2f}x, {n_b} steps); GPU work stretched {ratio:.2f}x"
    )
    assert lo * step_a <= step_b <= hi * step_a, (d.name, a["binds"], a["lines"])


if DRAWS:  # make lab only: an empty parameter set would be a skip in the suite
    test_lab_step_predicted_for_card_b_holds_the_measured = pytest.mark.parametrize(
        "d", DRAWS, ids=lambda d: d.name
    )(_lab_step_predicted_for_card_b_holds_the_measured)
