"""The lab's randomized draws (pure, no root): the older families draw exactly what they drew before
the input families came (issue 23), and the input families are bounded so the input really limits
the job."""

from __future__ import annotations

import hashlib

import pytest

from lab.draws import (
    FAMILIES,
    HELD_OUT_SEEDS,
    INPUT_FAMILIES,
    INPUT_HELD_OUT_SEEDS,
    INPUT_TUNE_SEEDS,
    TUNE_SEEDS,
    draw,
)
from lab.trainer import REGIMES

INPUT_SEEDS = INPUT_TUNE_SEEDS + INPUT_HELD_OUT_SEEDS


def test_the_older_seeds_draw_what_they_always_drew() -> None:
    """The digest of every older seed's draw on 1, 2 and 8 CPUs, taken before the input families
    were added: old and new matrices compare like for like."""
    h = hashlib.sha256()
    for cpus in (1, 2, 8):
        for seed in TUNE_SEEDS + HELD_OUT_SEEDS:
            h.update(repr(draw(seed, cpus)).encode())
    assert h.hexdigest()[:16] == "7768db17b9eb6b05"
    assert {draw(s, 2).family for s in TUNE_SEEDS + HELD_OUT_SEEDS} == set(FAMILIES)


def test_the_input_families_have_seeds_of_their_own() -> None:
    assert not set(INPUT_SEEDS) & set(TUNE_SEEDS + HELD_OUT_SEEDS)
    assert not set(INPUT_TUNE_SEEDS) & set(INPUT_HELD_OUT_SEEDS)
    fams = [draw(s, 2).family for s in INPUT_SEEDS]
    assert set(fams) == set(INPUT_FAMILIES)
    assert {draw(s, 2).regime for s in INPUT_SEEDS} <= set(REGIMES)
    # the suite's first few held-out input draws hold both families
    assert {draw(s, 2).family for s in INPUT_HELD_OUT_SEEDS[:2]} == set(INPUT_FAMILIES)


@pytest.mark.parametrize("cpus", [1, 2, 8])
def test_streaming_draws_are_bound_by_the_link(cpus: int) -> None:
    draws = [d for d in (draw(s, cpus) for s in INPUT_SEEDS) if d.family == "network-input"]
    assert len(draws) >= 60
    for d in draws:
        a = d.args
        assert d.link_mbit and d.cpuset is None
        transfer = a["objects"] * a["object-bytes"] * 8 / (d.link_mbit * 1e6)  # a batch on the link
        assert 0.2 <= transfer <= 1.7, d
        assert a["compute-step"] <= 0.3 * transfer, d  # the GPUs starve >= 70% of each step
        assert 1 <= a["workers"] <= 4
    # randomized: link rate, object size, worker count and step time all vary
    for key in ("link", "object-bytes", "workers", "compute-step"):
        values = {d.link_mbit if key == "link" else d.args[key] for d in draws}
        assert len(values) >= 3, key


@pytest.mark.parametrize("cpus", [1, 2, 8])
def test_inline_decode_draws_sleep_through_a_shorter_gpu_step(cpus: int) -> None:
    draws = [d for d in (draw(s, cpus) for s in INPUT_SEEDS) if d.family == "cpu-inline"]
    assert len(draws) >= 60
    for d in draws:
        a = d.args
        assert d.regime == "cpu" and a["workers"] == 0
        assert 0.15 <= a["decode-seconds"] <= 0.45
        assert a["compute-step"] <= 0.5 * a["decode-seconds"], d  # starved >= 2/3 of the time
        assert d.cpuset is None or d.cpuset < cpus
    ratios = {round(d.args["compute-step"] / d.args["decode-seconds"], 2) for d in draws}
    assert len(ratios) >= 10
