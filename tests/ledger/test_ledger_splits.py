"""A GPU's tick is booked by its shares, not whole to its largest one: a real GPU averages its
readings over the tick and a step is 0.1-2 s, so a tick almost always mixes work and waiting
(docs/goodput.md). The lab's ledger test checks the same on real load against the jobs' own phase
logs (tests/ledger/test_ledger_lab.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_synth import CFG, ledger

from agent.classifier.published import unclassified
from agent.ledger.assign import (
    BUCKETS,
    STARTUP_WORK,
    Bucket,
    GpuState,
    LedgerReading,
    Pressures,
    Split,
    Tick,
    assign,
    gpu_time,
)

WHOLE = (GpuState.WORKING, GpuState.SPINNING, GpuState.STARVED)
T0 = 1_700_000_000.0


def reading(sm: float, util: float = 1.0, busy: bool = True) -> LedgerReading:
    return LedgerReading("GPU-0", True, util, sm, 400.0, 700.0, busy)


def split_of(a: float, b: float, c: float) -> Split:
    total = a + b + c
    return Split(a / total, b / total, c / total)


pressure = st.floats(0, 1)
shares = st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)).filter(lambda t: sum(t) > 1e-3)


@settings(max_examples=300, deadline=None)
@given(
    shares,
    st.builds(Pressures, pressure, pressure, pressure, pressure, pressure),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.floats(0.01, 30.0),
)
def test_a_mixed_tick_books_each_share_as_its_whole_class_would(
    raw, p, job, checkpointing, startup, seconds
) -> None:
    """Booking is linear in the shares: a tick w working, s spinning, t starved books w times what
    a wholly working tick books, plus s times a spinning one's, plus t times a starved one's."""
    split = split_of(*raw)
    g = reading(0.5)
    tick = Tick(seconds, (g,), job, p, checkpointing, startup)
    got = assign(tick, [split])
    parts = [assign(tick, [state]) for state in WHOLE]
    want = [sum(share * part[i] for share, part in zip(split, parts, strict=True)) for i in range(len(got))]
    assert all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) for a, b in zip(got, want, strict=True))
    assert math.isclose(sum(got), seconds, rel_tol=1e-9)


def test_a_sample_half_working_books_half_a_second_productive() -> None:
    """SM 41% where full work reads 82%: half the tick computed, half starved (util 50%), as
    issue 32's sample spanning half a step and half a wait."""
    full = CFG.full_work_sm
    g = reading(full / 2, util=0.5)
    t = gpu_time(g, unclassified(CFG))
    assert isinstance(t, Split) and t.working == pytest.approx(0.5)
    got = dict(zip(BUCKETS, assign(Tick(1.0, (g,), True), [t]), strict=True))
    assert got[Bucket.PRODUCTIVE] == pytest.approx(0.5)
    assert got[Bucket.IDLE] == pytest.approx(0.5)  # no pressure explains the wait
    assert gpu_time(LedgerReading("GPU-0", False, None, None, None, None, True), unclassified(CFG)) is (
        GpuState.DOWN
    )


@pytest.mark.parametrize(("working", "ends"), [(STARTUP_WORK * 0.6, False), (STARTUP_WORK * 1.2, True)])
def test_a_job_starved_from_its_first_step_stops_starting_up_at_its_first_work(working, ends) -> None:
    """A job appears (the ledger watched before it); its GPU works ``working`` of each tick from
    the start. Under the threshold it is still loading (power drifts a few percent while nothing
    runs); over it, it has started, though no tick is mostly work."""
    led = ledger()
    g = reading(0.0, util=0.0, busy=False)
    led.tick(T0 + 1, 1.0, [g], [Split(0.0, 0.0, 1.0)], False, Pressures(), None)
    busy = reading(0.3, busy=True)
    for i in range(5):
        led.tick(T0 + 2 + i, 1.0, [busy], [Split(working, 0.0, 1.0 - working)], True, Pressures(), None)
    assert led.startup is not ends
    seconds = dict(zip(BUCKETS, led.book.everything()[0], strict=True))
    assert seconds[Bucket.PRODUCTIVE] == pytest.approx(5 * working)
    # while it starts up, what is not work is startup; after, the waits' own buckets
    assert seconds[Bucket.STARTUP] == pytest.approx((5 if not ends else 1) * (1 - working))
