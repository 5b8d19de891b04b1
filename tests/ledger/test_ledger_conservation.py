"""The conservation law: for any sequence of snapshots and events, the buckets (settled plus
unsettled) add up to GPUs x elapsed time within one sample, and settled counters never go down.
It holds per job too: the jobs' GPU-seconds plus ``no-job``'s equal GPUs x time, bucket by bucket
in every slot, and each job keeps exactly the GPU-seconds it was given (the late facts, a periodic
save or the work lost at a reclaim, move seconds between a job's buckets, never between jobs). The
pressures drawn include the host shapes' claims (``Pressures.host_spin``, ``host_starved``), and the
shares of a tick the trainer said it spent saving and evaluating (tna_client's spans)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_synth import CFG, gpu

from agent.classifier.published import unclassified
from agent.ledger.assign import INDEX, NO_JOB, Bucket, N, Pressures, gpu_time
from agent.ledger.book import Book
from agent.ledger.saved import Saved
from agent.ledger.state import Ledger

STATE_NAMES = ["working", "spinning", "starved", "between", "down"]
JOBS = ["4127", "4128", NO_JOB]
NO_JOB_BUCKET = INDEX[Bucket.NO_JOB]

pressure = st.floats(0, 1)
HOST_BUCKETS = [Bucket.HOST_LAUNCH, Bucket.HOST_COPY, Bucket.CHECKPOINT]
# a host shape's claim on the spinning or the starved time: the bucket it books to, its pressure
# (none at all is drawn often: the classifier drops such a claim, a caller of assign may not)
claim_pressure = st.one_of(st.just(0.0), pressure)
host_claims = st.lists(st.tuples(st.sampled_from(HOST_BUCKETS), claim_pressure), max_size=3).map(tuple)
tick = st.tuples(
    st.just("tick"),
    st.floats(0.001, 30.0),  # seconds since the previous snapshot
    st.lists(
        st.tuples(st.sampled_from(STATE_NAMES), st.booleans(), st.sampled_from(JOBS)), min_size=0, max_size=8
    ),
    st.booleans(),  # job
    st.builds(Pressures, pressure, pressure, pressure, pressure, pressure, host_claims, host_claims),
    st.one_of(st.none(), st.floats(0.0001, 1.0)),  # price per GPU-second
    st.floats(-5.0, 5.0),  # wall clock jitter (steps back too)
    st.tuples(
        st.one_of(st.just(0.0), pressure), st.one_of(st.just(0.0), pressure)
    ),  # told: saving, evaluating
)
event = st.one_of(
    st.tuples(
        st.just("checkpoint"),
        st.sampled_from(["requested", "completed", "missed", "canceled", "unreachable", "no-target"]),
        st.sampled_from(["a", "b", "drill-1"]),
        st.booleans(),
        st.floats(-600, 60),  # when, against the current wall time
    ),
    st.tuples(st.just("saved"), st.floats(-4000, 10), st.one_of(st.none(), st.floats(0, 900))),
    st.tuples(st.just("interruption")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(tick, event), min_size=1, max_size=120), st.sampled_from([1.0, 10.0, 60.0]))
def test_buckets_sum_to_gpus_times_elapsed_time(steps, resolution) -> None:
    led = Ledger(Book(resolution, settle=float(resolution * 5), keep=86400.0))
    mono = 0.0
    wall = 1_700_000_000.0
    given_seconds = 0.0
    previous_settled = [0.0] * N
    given_jobs: dict[str, float] = {}
    for s in steps:
        if s[0] == "tick":
            _, dt, gpus_spec, job, p, price, jitter, told = s
            mono += dt
            wall += dt + jitter
            gpus = [gpu(i, name, busy) for i, (name, busy, _) in enumerate(gpus_spec)]
            keys = [key for _, _, key in gpus_spec]
            states = [gpu_time(g, unclassified(CFG)) for g in gpus]
            booked = led.tick(wall, dt, gpus, states, job, p, price, keys, told)
            assert all(x >= -1e-9 for x in booked)
            assert math.isclose(sum(booked), dt * len(gpus), rel_tol=1e-9, abs_tol=1e-9)
            # a host bucket is booked only where a shape claims it (a checkpoint also while one is asked)
            claimed = {b for b, _ in p.host_spin + p.host_starved}
            for b in (Bucket.HOST_LAUNCH, Bucket.HOST_COPY):
                assert b in claimed or booked[INDEX[b]] == 0, (b, p)
            # evaluation only where the trainer said it evaluated
            assert told[1] > 0 or booked[INDEX[Bucket.EVALUATION]] == 0, told
            given_seconds += dt * len(gpus)
            # a GPU booked as no-job (no process of its own, or none on the node) is no job's
            per_gpu = any(busy for _, busy, _ in gpus_spec)
            for _, busy, key in gpus_spec:
                used = busy if per_gpu else job
                given_jobs[key if used else NO_JOB] = given_jobs.get(key if used else NO_JOB, 0.0) + dt
        elif s[0] == "checkpoint":
            _, phase, eid, drill, when = s
            r = led.checkpoint(phase, eid, wall + when, drill, 5.0)
            if r is not None:
                assert math.isclose(sum(r.jobs.values()), r.lost_gpu_seconds, rel_tol=1e-9, abs_tol=1e-6)
        elif s[0] == "saved":
            _, when, seconds = s
            led.saved(Saved(time=wall + when, seconds=seconds, step=1, path=None, pid=1))
        else:
            led.interruption()
        everything, money = led.book.everything()
        assert math.isclose(sum(everything), given_seconds, rel_tol=1e-9, abs_tol=1e-6)
        assert all(x >= -1e-6 for x in everything), everything
        assert all(x >= -1e-9 for x in money), money
        assert all(b >= a - 1e-9 for a, b in zip(previous_settled, led.book.seconds, strict=True))
        previous_settled = list(led.book.seconds)
        _jobs_add_up(led, given_jobs)
    led.book.settle_all()
    assert math.isclose(sum(led.book.seconds), given_seconds, rel_tol=1e-9, abs_tol=1e-6)


def _jobs_add_up(led: Ledger, given_jobs: dict[str, float]) -> None:
    for slot in led.book.slots:
        for i in range(N):
            assert math.isclose(
                sum(js[i] for js, _ in slot.jobs.values()), slot.seconds[i], rel_tol=1e-9, abs_tol=1e-6
            )
            assert math.isclose(
                sum(jc[i] for _, jc in slot.jobs.values()), slot.cost[i], rel_tol=1e-9, abs_tol=1e-6
            )
        assert all(x >= -1e-6 for js, _ in slot.jobs.values() for x in js)
        # only no-job holds no-job's bucket
        assert all(js[NO_JOB_BUCKET] == 0 for k, (js, _) in slot.jobs.items() if k != NO_JOB)
    booked = {k: sum(v[0]) for k, v in led.book.jobs_since(-math.inf).items()}
    for key, seconds in given_jobs.items():
        assert math.isclose(booked.get(key, 0.0), seconds, rel_tol=1e-9, abs_tol=1e-6), key
    assert set(booked) <= set(given_jobs) | {NO_JOB}


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 8), st.lists(st.floats(0.05, 5.0), min_size=2, max_size=200))
def test_constant_gpus_give_gpus_times_wall_time(n, intervals) -> None:
    """Snapshots at arbitrary intervals: the total is n x (last - first snapshot) exactly, so against
    the wall time from the first snapshot it is off by at most one sample."""
    led = Ledger(Book(10.0, 60.0, 86400.0))
    gpus = [gpu(i, "working") for i in range(n)]
    states = [gpu_time(g, unclassified(CFG)) for g in gpus]
    t = 1_700_000_000.0
    for dt in intervals:
        t += dt
        led.tick(t, dt, gpus, states, True, Pressures(), None)
    everything, _ = led.book.everything()
    assert math.isclose(sum(everything), n * sum(intervals), rel_tol=1e-9)
    assert abs(sum(everything) - n * (sum(intervals) - intervals[0])) <= n * max(intervals) + 1e-6


@pytest.mark.parametrize("state", ["spinning", "starved", "between"])
def test_host_claims_of_no_pressure_book_nothing_to_the_host(state: str) -> None:
    """A claim at pressure 0 explains none of the time (it divided by zero, found by the law above):
    the tick books as it would with no claim at all."""
    gpus = [gpu(0, state), gpu(1, state)]
    states = [gpu_time(g, unclassified(CFG)) for g in gpus]
    nothing = ((Bucket.HOST_LAUNCH, 0.0), (Bucket.CHECKPOINT, 0.0))
    claimed = Ledger(Book(10.0, 60.0, 86400.0)).tick(
        1_700_000_000.0, 2.0, gpus, states, True, Pressures(host_spin=nothing, host_starved=nothing), None
    )
    plain = Ledger(Book(10.0, 60.0, 86400.0)).tick(
        1_700_000_000.0, 2.0, gpus, states, True, Pressures(), None
    )
    assert claimed == plain and math.isclose(sum(claimed), 4.0)
    assert claimed[INDEX[Bucket.HOST_LAUNCH]] == claimed[INDEX[Bucket.CHECKPOINT]] == 0
