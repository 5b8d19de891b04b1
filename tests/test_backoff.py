"""The one backoff rule (agent/core/backoff.py): doubling from the base, capped, equal jitter."""

from __future__ import annotations

import pytest

from agent.core.backoff import Backoff, delay


@pytest.mark.parametrize("failures", range(1, 12))
def test_each_wait_is_in_the_upper_half_of_its_doubling(failures: int):
    grown = min(10.0, 0.1 * 2 ** (failures - 1))
    waits = [delay(failures, 0.1, 10.0) for _ in range(200)]
    assert all(grown / 2 <= w <= grown for w in waits), (min(waits), max(waits))
    assert max(waits) - min(waits) > grown / 4  # jittered: 200 draws spread over the half


def test_the_cap_holds_however_many_failures():
    assert all(delay(n, 0.5, 30.0) <= 30.0 for n in (50, 100, 10_000))
    assert delay(10_000, 0.5, 30.0) >= 15.0
    assert delay(0, 1.0, 5.0) <= 1.0  # no failure yet reads as the first


def test_the_state_counts_failures_and_resets():
    b = Backoff(1.0, 8.0)
    waits = [b.next() for _ in range(6)]
    assert b.failures == 6
    assert waits[0] <= 1.0 and 4.0 <= waits[4] <= 8.0 and 4.0 <= waits[5] <= 8.0
    b.reset()
    assert b.failures == 0 and b.next() <= 1.0
