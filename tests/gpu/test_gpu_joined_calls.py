"""A GPU whose calls hang holds only itself: the collector reads the GPUs on the calling thread, and a
call that joins one stuck in a GPU (as the sampler joins a call that has run ``join_after``) reads
the others at once and shows that GPU unresponsive; the stuck call stops once its GPU answers, and
the GPU is read again by the next call."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import time
from pathlib import Path

import pytest
from gpu_fixtures import Stuck, fake_nvml, fake_nvml_library  # noqa: F401

from agent.devtools.fake_nvml import FakeNvml
from agent.sources.gpu.collector import GpuCollector, Superseded

CALL_TIMEOUT = 0.3
HANG_MS = 2000  # each call of the hung GPU


def test_a_call_joining_one_stuck_in_a_gpu_reads_the_others(
    fake_nvml: FakeNvml, fake_nvml_library: Path
) -> None:
    c = GpuCollector(library=str(fake_nvml_library), call_timeout=CALL_TIMEOUT, xid_events=False)
    try:
        assert all(g.up for g in c.collect().gpus)
        assert c.join_after == CALL_TIMEOUT  # what the sampler reads to join a call
        fake_nvml.set(3, delay_ms=HANG_MS)
        stuck = Stuck(c)
        time.sleep(CALL_TIMEOUT + 0.1)  # the sampler joins a call that has run join_after
        fake_nvml.set(5, utilization_gpu=77)
        t0 = time.monotonic()
        part = c.collect()
        took = time.monotonic() - t0
        assert took < CALL_TIMEOUT, took  # GPU 3 held its stuck call past call_timeout already: not waited
        assert [g.index for g in part.gpus if not g.up] == [3]
        hung = part.gpus[3]
        assert hung.unresponsive_seconds is not None and hung.unresponsive_seconds >= CALL_TIMEOUT
        assert part.gpus[5].utilization == pytest.approx(0.77, abs=0.01)  # read now, not the stuck call's
        # the next call, joining nothing, still finds GPU 3 inside the stuck call
        assert [g.index for g in c.collect().gpus if not g.up] == [3]
        fake_nvml.set(3, delay_ms=0)  # the call in flight returns; the rest of GPU 3's reads are quick
        stuck.thread.join(HANG_MS / 1000 + 5)
        assert isinstance(stuck.ended, Superseded), stuck.ended  # stopped: its outcome is dropped
        assert all(g.up and g.unresponsive_seconds is None for g in c.collect().gpus)
    finally:
        fake_nvml.set(3, delay_ms=0)
        c.close()


def test_a_gpu_inside_a_call_for_less_than_call_timeout_is_waited_for(
    fake_nvml: FakeNvml, fake_nvml_library: Path
) -> None:
    """A joining call finds a GPU the other call took only just now: it waits what is left of
    call_timeout for it, and reads it once free, as a tick waited for a slow GPU before."""
    c = GpuCollector(library=str(fake_nvml_library), call_timeout=1.0, xid_events=False)
    try:
        c.collect()
        fake_nvml.set(6, delay_ms=150)  # slow, not hung: each of its reads takes 150 ms
        stuck = Stuck(c)
        time.sleep(0.2)  # inside GPU 6's reads
        fake_nvml.set(6, delay_ms=0)
        part = c.collect()
        assert all(g.up for g in part.gpus), [g.index for g in part.gpus if not g.up]
        stuck.thread.join(5)
        assert isinstance(stuck.ended, Superseded), stuck.ended
    finally:
        c.close()
