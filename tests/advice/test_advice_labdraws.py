"""The advice lab's pure parts (lab.advicedraws) and the fake GPUs' compute-phase fields (lab.gpu's
WORK_ENV): fast, no root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.advice.catalog import shipped
from agent.advice.estimate import gpu_work
from lab.advicedraws import (
    FAMILIES,
    HELD_OUT_SEEDS,
    TUNE_SEEDS,
    advice_draw,
    card_ratio,
    gpu_seconds_on,
    step_seconds,
)
from lab.gpu import WORK_ENV, LabGpus


def test_draws_are_their_seeds_and_cover_every_family_held_out_apart() -> None:
    assert not set(TUNE_SEEDS) & set(HELD_OUT_SEEDS)
    assert advice_draw(HELD_OUT_SEEDS[0]) == advice_draw(HELD_OUT_SEEDS[0])
    assert advice_draw(HELD_OUT_SEEDS[0]).family == "compute"  # the suite's one pair
    assert {advice_draw(s).family for s in HELD_OUT_SEEDS[:4]} == set(FAMILIES)


@pytest.mark.parametrize("seed", HELD_OUT_SEEDS[:8])
def test_card_b_work_is_stretched_by_a_ratio_the_estimate_spans(seed: int) -> None:
    d = advice_draw(seed)
    cat = shipped()
    r = card_ratio(cat, d.card_a, d.card_b, d.tensor, d.dram)
    lo, hi = gpu_work(cat.cards[d.card_a], cat.cards[d.card_b], d.tensor, d.dram)
    assert lo < r < hi  # the centre of the estimate's own range at the painted mix
    assert gpu_seconds_on(d, d.card_a, cat) == d.gpu_seconds
    assert gpu_seconds_on(d, d.card_b, cat) == pytest.approx(d.gpu_seconds * r, abs=1e-4)


def test_step_seconds_times_steps_after_the_skip() -> None:
    lines = [{"wall": 100.0, "regime": "compute", "seconds": 10}]
    lines += [{"wall": 100.0 + 0.5 * k, "phase": "starved"} for k in range(20)]
    lines += [{"wall": 100.25 + 0.5 * k, "phase": "compute"} for k in range(20)]
    lines.sort(key=lambda x: x["wall"])
    assert step_seconds(lines, skip=3.0) == (pytest.approx(0.5), 13)
    with pytest.raises(ValueError, match="too few"):
        step_seconds(lines, skip=9.5)
    with pytest.raises(ValueError, match="no start line"):
        step_seconds(lines[1:])


def test_the_work_fields_show_while_computing_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(WORK_ENV, json.dumps({"tensor_active": 33.0, "dram_active": 44.0}))
    gpus = LabGpus(tmp_path / "s.json", gpus=2, averaged=False)
    compute = gpus.devices(["compute", "compute"], [1, 1])
    assert (compute[0]["tensor_active"], compute[0]["dram_active"]) == (33.0, 44.0)
    assert compute[1]["dram_active"] is None  # the GPU without GPM keeps none
    starved = gpus.devices(["starved", "spin"], [1, 1])
    assert starved[0]["tensor_active"] == 0.0 and starved[0]["dram_active"] == 0.0
    # averaged: the integrals keep the DRAM key through the other phases (a key that comes and goes
    # restarted them at every phase change, and the fake then answered DRAM from the instant)
    avg = LabGpus(tmp_path / "u.json", gpus=2, averaged=True)
    for phase in ("compute", "spin", "compute", "starved"):
        dev = avg.devices([phase, phase], [1, 1])[0]
    assert len(dev["integrals"]) == 5 and all("dram_active" in x for x in dev["integrals"])
    monkeypatch.setenv(WORK_ENV, "[1]")
    with pytest.raises(ValueError, match=WORK_ENV):
        LabGpus(tmp_path / "t.json", gpus=2, averaged=False)


def test_a_named_product_decides_gpm_for_every_gpu(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(WORK_ENV, raising=False)
    for product, has in (("H20", True), ("L20", False)):
        gpus = LabGpus(tmp_path / f"{product}.json", gpus=2, averaged=False, readings=[{"product": product}])
        devs = gpus.devices(["compute", "compute"], [1, 1])
        assert [d["name"] for d in devs] == [f"NVIDIA {product}"] * 2
        assert [d["sm_active"] is not None for d in devs] == [has, has]
