"""The GPUs' reads off the collector's thread: the GPUs that answer come back however many hang, a
hung GPU is known as such until its call returns, and errors reach the collector."""

from __future__ import annotations

import threading
import time

import pytest

from agent.sources.gpu.calls import Readers


def test_hung_gpus_cost_at_most_two_call_timeouts_and_the_rest_answer() -> None:
    release = threading.Event()
    readers = Readers(call_timeout=0.2)

    def answers(i: int):
        return lambda: f"gpu{i}"

    def hangs():
        release.wait(30)
        return "late"

    jobs = [(0, answers(0)), (1, hangs), (2, answers(2)), (3, hangs), (4, hangs), (5, answers(5))]
    t0 = time.monotonic()
    out = readers.read(jobs)
    took = time.monotonic() - t0
    try:
        assert {i: v for i, (v, _) in out.items()} == {0: "gpu0", 2: "gpu2", 5: "gpu5"}
        assert took < 2 * 0.2 + 1.0, took  # two call timeouts, and slack for a loaded machine
        now = time.monotonic()
        hung = {i: readers.hung_for(i, now) for i in range(6)}
        assert [i for i, s in hung.items() if s is not None] == [1, 3, 4]
        assert all(s >= 0.15 for s in (hung[1], hung[3], hung[4]))
        # the next tick asks only the GPUs that answer: one reader, no wait
        t0 = time.monotonic()
        again = readers.read([(0, answers(0)), (2, answers(2)), (5, answers(5))])
        assert set(again) == {0, 2, 5} and time.monotonic() - t0 < 0.2
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while any(readers.hung_for(i, time.monotonic()) is not None for i in (1, 3, 4)):
        assert time.monotonic() < deadline, "the hung calls returned, but the GPUs still read as hung"
        time.sleep(0.01)
    assert set(readers.read(jobs)) == set(range(6))  # all answer again, on the readers they freed
    readers.close()


def test_an_error_in_a_read_reaches_the_collector() -> None:
    readers = Readers(call_timeout=1.0)

    def fails():
        raise RuntimeError("driver went away")

    out = readers.read([(0, lambda: 1), (1, fails), (2, lambda: 3)])
    assert out[0] == (1, None) and out[2] == (3, None)
    with pytest.raises(RuntimeError, match="driver went away"):
        raise out[1][1]  # type: ignore[misc]
    readers.close()
