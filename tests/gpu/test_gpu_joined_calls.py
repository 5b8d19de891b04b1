"""A GPU whose calls hang holds only itself: the collector reads the GPUs on the calling thread, and a
call that joins one stuck in a GPU (as the sampler joins a call that has run ``join_after``) reads
the others at once and shows that GPU unresponsive; the stuck call stops once its GPU answers, and
the GPU is read again by the next call, also across NVML shut down and opened again meanwhile."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import wait_until
from gpu_fixtures import Stuck, collected, fake_nvml, fake_nvml_library  # noqa: F401
from structlog.testing import capture_logs

from agent.devtools.fake_nvml import FakeNvml
from agent.sources.gpu.collector import GpuCollector, Superseded
from agent.sources.gpu.nvml import NvmlDriverError

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


def test_a_gpu_hung_across_a_reinit_holds_its_call_only(fake_nvml: FakeNvml, fake_nvml_library: Path) -> None:
    """A driver error shuts NVML down and opens it again while a call hangs in GPU 3. The new
    session's calls find GPU 3 still held (its lock is kept by index, not by session) and show it
    unresponsive since the hang began, without entering it; and the hung call's own late driver
    error, which belongs to the session shut down under it, does not shut the new one down."""
    hang_ms = 4000  # the one call already inside GPU 3 when its delay is lifted
    c = GpuCollector(
        library=str(fake_nvml_library), call_timeout=CALL_TIMEOUT, xid_events=False, reinit_backoff_max=0.3
    )
    try:
        c.collect()
        fake_nvml.set(3, delay_ms=hang_ms)
        stuck = Stuck(c)
        hung_at = time.monotonic()
        time.sleep(CALL_TIMEOUT + 0.1)
        fake_nvml.set_top(driver_error="UNKNOWN")
        with pytest.raises(NvmlDriverError, match="Unknown Error"):
            c.collect()  # joined: meets the driver error at GPU 0, and shuts NVML down
        # the driver is back and GPU 3's new calls answer; the call already inside it sleeps on
        fake_nvml.set_top(driver_error=None)
        fake_nvml.set(3, delay_ms=0)
        reopening = time.monotonic()
        part = wait_until(lambda: collected(c), 5.0)
        assert time.monotonic() - hung_at < hang_ms / 1000 - 1.0, "the hung call returned too soon to test"
        assert stuck.thread.is_alive()
        assert [g.index for g in part.gpus if not g.up] == [3]
        held = part.gpus[3].unresponsive_seconds
        # since the hang began, not since the re-init
        assert held is not None and held >= reopening - hung_at - 0.2, (held, reopening - hung_at)
        # the driver errs as the hung call returns, then recovers: that error is the old session's
        with capture_logs() as logs:
            fake_nvml.set_top(driver_error="UNKNOWN")
            stuck.thread.join(hang_ms / 1000 + 5)
            fake_nvml.set_top(driver_error=None)
            after = c.collect()
        assert all(g.up for g in after.gpus), [g.index for g in after.gpus if not g.up]
        # the session opened after the first error was not shut down and opened once more
        assert not [e["event"] for e in logs if e["event"].startswith("NVML")], logs
        assert isinstance(stuck.ended, Superseded), stuck.ended
    finally:
        fake_nvml.set_top(driver_error=None)
        fake_nvml.set(3, delay_ms=0)
        c.close()
