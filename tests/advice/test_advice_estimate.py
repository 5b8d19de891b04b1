"""The estimate's properties (issue 45's acceptance), on made-up cards and instances so that every
axis can be moved on its own: a job with no GPU work gains nothing from a faster card; a candidate
worse on every axis never comes out ahead; a candidate that cannot hold the peak is never advised;
the cost ranking follows the prices set. And the scaling table covers every ledger bucket."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.advice.catalog import Card, Catalog, Instance
from agent.advice.estimate import SCALING, JobFigures, Scaling, ThisNode, estimate, gpu_work, rank, shares
from agent.advice.words import advice
from agent.core.vocabulary import Bucket

HERE_CARD = Card(tensor_tflops=400.0, bandwidth_gbs=2000.0, memory_gb=80.0)
HERE = ThisNode("here.8x", "testcloud", "here", 8, 64, True, 100.0, "none", "test")
GB = 10**9

buckets = st.dictionaries(
    st.sampled_from(sorted(SCALING)), st.floats(0, 1e5, allow_nan=False, allow_infinity=False), min_size=1
)
ratio = st.floats(0.1, 10.0)
mix = st.one_of(st.none(), st.floats(0.0, 1.0))


def catalog(*cards: tuple[str, Card], instances: tuple[Instance, ...] = ()) -> Catalog:
    return Catalog({"here": HERE_CARD, **dict(cards)}, {i.id: i for i in instances})


def card(tf: float, bw: float, mem: float = 80.0) -> Card:
    return Card(tensor_tflops=tf, bandwidth_gbs=bw, memory_gb=mem)


def inst(
    name: str, card: str, *, gpus: int = 8, vcpus: int = 64, gbps: float = 100.0, **kw: object
) -> Instance:
    return Instance(
        id=name,
        cloud="testcloud",
        card=card,
        gpus=gpus,
        vcpus=vcpus,
        memory_gib=1000,
        network_gbps=gbps,
        **kw,
    )


def test_every_ledger_bucket_has_a_scaling_row():
    # issue 48 adds buckets in parallel: a member merged without a row here fails this test
    missing = sorted(str(b) for b in Bucket if str(b) not in SCALING)
    assert not missing, f"buckets without a scaling rule in agent/advice/estimate.py SCALING: {missing}"


def test_a_bucket_name_the_table_lacks_is_unchanged_and_said():
    cat = catalog(("fast", card(4000.0, 20000.0)), instances=(inst("fast.8x", "fast"),))
    job = JobFigures({"productive": 0.0, "a-new-bucket": 100.0}, 8)
    e = estimate(job, HERE, cat.instances["fast.8x"], cat, 0.1)
    assert e.step == (1.0, 1.0)
    out = advice(None, job, HERE, rank(job, HERE, cat, 0.1, {}), cat, [], 0.0)
    assert any('"a-new-bucket" has no scaling rule' in a for a in out["assumptions"])


@settings(max_examples=200, deadline=None)
@given(buckets, st.floats(1.0, 20.0), st.floats(1.0, 20.0), mix, mix)
def test_no_gpu_work_gains_nothing_from_a_faster_card(b, tf_gain, bw_gain, tensor, dram):
    b = {k: v for k, v in b.items() if SCALING[k] is not Scaling.GPU_WORK}
    faster = card(HERE_CARD.tensor_tflops * tf_gain, HERE_CARD.bandwidth_gbs * bw_gain)
    cat = catalog(("faster", faster), instances=(inst("faster.8x", "faster", nvlink=True),))
    job = JobFigures(b, 8, tensor, dram)
    e = estimate(job, HERE, cat.instances["faster.8x"], cat, 0.1)
    assert e.step is not None
    assert abs(e.step[0] - 1.0) < 1e-9 and abs(e.step[1] - 1.0) < 1e-9


@settings(max_examples=300, deadline=None)
@given(
    buckets,
    mix,
    mix,
    st.floats(50, 2000),
    st.floats(200, 8000),
    st.integers(8, 256),
    st.floats(10, 3200),
    st.booleans(),
    st.sampled_from(["none", "erdma", "efa", "infiniband"]),
    st.floats(1.0, 5.0),
    st.floats(1.0, 5.0),
    st.floats(1.0, 5.0),
    st.floats(1.0, 5.0),
    st.booleans(),
    st.booleans(),
)
def test_worse_on_every_axis_never_comes_out_ahead(
    b, tensor, dram, tf, bw, vcpus, gbps, nvlink, rdma, w_tf, w_bw, w_cpu, w_net, keep_nvlink, keep_rdma
):
    a = inst("a.8x", "a", vcpus=vcpus, gbps=gbps, nvlink=nvlink, rdma=rdma)
    # no better anywhere: slower card, fewer vCPUs, a slower NIC, NVLink and RDMA only where a has them
    bad = inst(
        "b.8x",
        "b",
        vcpus=max(8, int(vcpus / w_cpu)),
        gbps=gbps / w_net,
        nvlink=nvlink and keep_nvlink,
        rdma=rdma if keep_rdma else "none",
    )
    cat = catalog(("a", card(tf, bw)), ("b", card(tf / w_tf, bw / w_bw)), instances=(a, bad))
    job = JobFigures(b, 8, tensor, dram)
    ea, eb = estimate(job, HERE, a, cat, 0.1), estimate(job, HERE, bad, cat, 0.1)
    assert ea.step is not None and eb.step is not None
    assert eb.step[0] >= ea.step[0] - 1e-9 and eb.step[1] >= ea.step[1] - 1e-9


@settings(max_examples=200, deadline=None)
@given(buckets, st.floats(1.0, 200.0), st.floats(0.0, 0.5), st.floats(1.0, 200.0))
def test_a_card_too_small_for_the_peak_is_never_advised(b, peak_gb, headroom, small_gb):
    small = card(4000.0, 20000.0, mem=small_gb)  # the fastest card there is, and the cheapest
    big = card(100.0, 500.0, mem=1000.0)
    cat = catalog(
        ("small", small), ("big", big), instances=(inst("small.8x", "small"), inst("big.8x", "big"))
    )
    job = JobFigures(b, 8, None, None, int(peak_gb * GB))
    r = rank(job, HERE, cat, headroom, {"small.8x": 1.0, "big.8x": 100.0, "here.8x": 50.0}, price_here=50.0)
    out = advice("1", job, HERE, r, cat, [], 0.0)
    left_out = peak_gb > small_gb * (1 - headroom) + 1e-6
    by_id = {c["instance"]: c for c in out["candidates"]}
    if left_out:
        assert by_id["small.8x"]["excluded"] and "cannot hold" in by_id["small.8x"]["excluded"]
        assert by_id["small.8x"]["step_ratio"] is None
        assert not any("small.8x" in line for line in out["lines"])
    elif peak_gb <= small_gb * (1 - headroom) - 1e-6:
        assert by_id["small.8x"]["excluded"] is None


@settings(max_examples=200, deadline=None)
@given(buckets, mix, mix, st.lists(st.floats(0.5, 500.0), min_size=2, max_size=6, unique=True))
def test_the_cost_ranking_follows_the_prices_set(b, tensor, dram, prices):
    # the same instance under several names: only the price tells them apart
    same = [inst(f"twin{i}.8x", "here") for i in range(len(prices))]
    cat = catalog(instances=tuple(same))
    set_prices = {s.id: p for s, p in zip(same, prices, strict=True)}
    job = JobFigures(b, 8, tensor, dram)
    r = rank(job, HERE, cat, 0.1, set_prices, price_here=100.0)
    ranked = [e.instance.id for e in r.estimates]
    assert ranked == sorted(set_prices, key=set_prices.__getitem__)
    costs = [e.cost_per_work for e in r.estimates]
    assert all(c is not None for c in costs)
    assert costs == sorted(costs)


@given(ratio, ratio, mix, mix)
def test_the_card_ratio_lies_between_the_tflops_and_the_bandwidth_ratio(tf, bw, tensor, dram):
    there = card(HERE_CARD.tensor_tflops / tf, HERE_CARD.bandwidth_gbs / bw)
    lo, hi = gpu_work(HERE_CARD, there, tensor, dram)
    assert min(tf, bw) - 1e-9 <= lo <= hi <= max(tf, bw) + 1e-9
    if tensor is None or dram is None or tensor + dram == 0:
        # unknown mix: the whole span
        assert math.isclose(lo, min(tf, bw)) and math.isclose(hi, max(tf, bw))


def test_shares_leave_out_what_is_not_the_step():
    sh = shares(
        {"productive": 30.0, "data-cpu": 10.0, "no-job": 1e6, "startup": 50.0, "lost-to-preemption": 9.0}
    )
    assert sh.by_scaling == {Scaling.GPU_WORK: 0.75, Scaling.INPUT_CPU: 0.25}
    assert sh.total == 40.0
