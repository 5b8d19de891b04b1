"""The advice in words, on the demo's own figures (four fake H100s at 62 GiB, its made-up prices, the
node the demo's Alibaba simulator and fake NVML present): the input-bound phase is told to fix the
input first and shown a cheaper card that would do as well; the compute phase is never shown a
slower card without how much longer each step would take. And the JSON keeps the keys the report
page reads."""

from __future__ import annotations

import re

import pytest

from agent.advice.catalog import shipped
from agent.advice.estimate import JobFigures, rank
from agent.advice.recognise import recognise
from agent.advice.words import advice, status_line
from agent.devtools.demo_input import DEMO_NODE_PRICE, DEMO_PRICES
from agent.devtools.fake_nvml import PRODUCTS

GIB = 2**30
KEYS = {"instance", "binds", "lines", "candidates", "assumptions", "job", "made_at"}
CANDIDATE_KEYS = {
    "instance",
    "cloud",
    "card",
    "gpus",
    "step_ratio",
    "price_ratio",
    "cost_per_work_ratio",
    "excluded",
}
# the demo's fake GPUs while training (agent/devtools/demo.py _animate_gpus): tensor 40-52%, DRAM 30-40%
TENSOR, DRAM, PEAK = 0.46, 0.35, 62 * GIB
INPUT_PHASE = {"productive": 4.0, "data-cpu": 90.0, "idle": 6.0}  # GPU-seconds over the phase
COMPUTE_PHASE = {"productive": 95.0, "data-cpu": 3.0, "sync-wait": 2.0}


def demo_advice(buckets: dict[str, float], vcpus: int) -> dict:
    cat = shipped()
    node, notes = recognise(
        cat, "ecs.gn7i-c8g1.2xlarge", "alibaba", [PRODUCTS["H100"].name] * 4, vcpus, 64 * GIB
    )
    assert node is not None
    job = JobFigures(buckets, 4, TENSOR, DRAM, PEAK)
    r = rank(job, node, cat, 0.1, DEMO_PRICES, ("alibaba",), DEMO_NODE_PRICE)
    return advice(None, job, node, r, cat, notes, 1_700_000_000.0)


@pytest.mark.parametrize("vcpus", [2, 16, 64])  # the demo runs on whatever box it is given
def test_the_demo_input_phase_is_told_to_fix_the_input_and_shown_a_cheaper_card(vcpus):
    a = demo_advice(INPUT_PHASE, vcpus)
    assert a["binds"] == "input"
    assert a["lines"][0] == "fix the input first: on any card the data wait stays 90% of each step"
    m = re.match(
        r"`(\S+)` 4x (\S+) would do about as well: at most ~(\d\.\d\d)× the step time, at ~([\d.]+)×",
        a["lines"][1],
    )
    assert m, a["lines"]
    named = next(c for c in a["candidates"] if c["instance"] == m.group(1))
    assert named["card"] != "H100-SXM" and named["excluded"] is None
    assert named["price_ratio"] < 1 and float(m.group(4)) < 1  # cheaper per GPU-hour
    assert named["step_ratio"][1] <= 1.2 and float(m.group(3)) == pytest.approx(
        named["step_ratio"][1], abs=0.01
    )
    # the L20, A10, T4 and A100 40GB cannot hold 62 GiB with 10% free: left out, with the reason
    small = [c for c in a["candidates"] if c["card"] in ("L20", "A10", "T4", "A100-40GB")]
    assert small and all("cannot hold" in c["excluded"] for c in small)


@pytest.mark.parametrize("vcpus", [2, 16, 64])
def test_the_demo_compute_phase_never_sees_a_slower_card_without_its_step_time(vcpus):
    a = demo_advice(COMPUTE_PHASE, vcpus)
    assert a["binds"] == "gpu"
    assert a["lines"][0] == "its GPUs compute 95% of the time at 67 GB of 80 GB"
    by_id = {c["instance"]: c for c in a["candidates"]}
    named = [(line, m) for line in a["lines"][1:] if (m := re.search(r"`(\S+)`", line))]
    assert named
    assert a["lines"][-1] == "no candidate is faster per step than this node's H100-SXM"  # on Alibaba
    for line, m in named:
        c = by_id[m.group(1)]
        if c["step_ratio"][0] > 1.0:  # slower: the words say how much longer, with its range
            lo, hi = (float(x) for x in re.search(r"~(\d+\.\d)–(\d+\.\d)× longer per step", line).groups())
            assert lo == pytest.approx(c["step_ratio"][0], abs=0.05) and hi == pytest.approx(
                c["step_ratio"][1], abs=0.05
            )
    slower = [c for c in a["candidates"] if c["step_ratio"] and c["step_ratio"][0] > 1]
    assert slower, "the demo's candidates include slower cards"


def test_the_json_keeps_the_keys_the_report_page_reads():
    a = demo_advice(COMPUTE_PHASE, 16)
    assert set(a) == KEYS
    assert set(a["instance"]) == {"id", "cloud", "card", "gpus", "source"}
    assert a["candidates"] and all(set(c) == CANDIDATE_KEYS for c in a["candidates"])
    assert a["made_at"] == 1_700_000_000.0 and a["job"] is None
    left_out = [c for c in a["candidates"] if c["excluded"]]
    assert left_out == a["candidates"][-len(left_out) :]  # the left-out come last
    assert status_line(a).startswith("advice: its GPUs compute 95% of the time")


def test_an_unrecognised_node_gets_no_advice_and_says_why():
    job = JobFigures({"productive": 1.0}, 1)
    a = advice("7", job, None, None, shipped(), ['"NVIDIA B300" is no card of the catalog'], 0.0)
    assert a["instance"] is None and a["candidates"] == [] and a["binds"] == "unknown"
    assert a["lines"] == ["no advice: this node's instance is not recognised"]
    assert any("B300" in x for x in a["assumptions"])
