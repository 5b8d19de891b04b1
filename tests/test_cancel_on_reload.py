"""A reload cancels the parts' loops; each must end then, even when the cancel comes in the same turn
of the event loop as an event for it (agent/core/aio.py says why ``asyncio.wait_for`` does not)."""

from __future__ import annotations

import asyncio
import gc
import sys
import weakref
from datetime import UTC, datetime

import pytest
from conftest import async_wait_until, free_port
from structlog.testing import capture_logs

from agent.config import load_config
from agent.core.aio import next_within, wait_within
from agent.core.events import CheckpointEvent
from agent.core.vocabulary import CheckpointPhase
from agent.runtime.daemon import Daemon
from agent.runtime.supervisor import Supervisor


def _event(n: int) -> CheckpointEvent:
    return CheckpointEvent(
        phase=CheckpointPhase.REQUESTED,
        event_id=f"e{n}",
        notice_kind="spot-termination",
        deadline=datetime.now(UTC),
    )


async def _cancelled_as_it_arrives(wait, arrive) -> asyncio.Task:
    task = asyncio.create_task(wait)
    await asyncio.sleep(0)  # the task now waits
    arrive()
    task.cancel()  # the same turn of the loop: what a reload right after a publish does
    await asyncio.wait([task], timeout=5)
    return task


async def test_a_queue_wait_cancelled_as_the_item_arrives_ends_and_keeps_the_item():
    q: asyncio.Queue[int] = asyncio.Queue()
    task = await _cancelled_as_it_arrives(next_within(q, 60), lambda: q.put_nowait(1))
    assert task.cancelled()
    assert q.get_nowait() == 1  # not lost: the next generation's reader could have it


async def test_a_flag_wait_cancelled_as_the_flag_is_set_ends():
    flag = asyncio.Event()
    task = await _cancelled_as_it_arrives(wait_within(flag, 60), flag.set)
    assert task.cancelled()


async def test_the_waits_time_out():
    assert await next_within(asyncio.Queue(), 0.01) is None
    assert await wait_within(asyncio.Event(), 0.01) is False
    q: asyncio.Queue[int] = asyncio.Queue()
    q.put_nowait(7)
    assert await next_within(q, 0.01) == 7
    flag = asyncio.Event()
    flag.set()
    assert await wait_within(flag, 0.01) is True


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for is built on asyncio.timeout since 3.12")
async def test_why_not_wait_for_it_swallows_that_cancel_on_3_11():
    q: asyncio.Queue[int] = asyncio.Queue()
    task = await _cancelled_as_it_arrives(asyncio.wait_for(q.get(), 60), lambda: q.put_nowait(1))
    assert not task.cancelled() and task.result() == 1


async def test_reloads_right_after_events_leave_no_part_of_an_old_generation_running(tmp_path):
    """The soak's RSS growth: a classifier or goodput loop that a reload cancelled as a checkpoint
    event reached it kept running on a queue nobody fed, and held its whole generation."""
    config = tmp_path / "agent.toml"
    config.write_text(f"""
[agent]
interval = "200ms"
state_dir = "{tmp_path / "state"}"
runtime_dir = "{tmp_path / "run"}"
[http]
listen = "127.0.0.1:{free_port()}"
control_socket = "{tmp_path / "run" / "control.sock"}"
[gpu]
enabled = false
[preemption]
provider = "none"
[trainer]
discovery_file = "{tmp_path / "run" / "agent.json"}"
""")
    daemon = Daemon(load_config(str(config)), str(config))
    run = asyncio.create_task(daemon.run())
    try:
        await async_wait_until(
            lambda: daemon.components and daemon.supervisor.states.get("classifier", None),
            timeout=30,  # on a loaded machine
            what="the parts running",
        )
        names = {c.name for c in daemon.components}
        assert {"classifier", "goodput"} <= names, names  # the parts that read checkpoint events
        first = [weakref.ref(c) for c in daemon.components]
        reloads = 12
        for n in range(reloads):
            await asyncio.sleep(0.3)  # the new parts are waiting on their queues again
            daemon.bus.publish(_event(n))
            ok, msg = await daemon.reload()  # no await between the publish and the cancel
            assert ok, msg
        assert daemon.reloads == reloads
        keepers = [
            t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "Supervisor._keep" and not t.done()
        ]
        assert len(keepers) == len(daemon.supervisor._tasks) + len(daemon.lifetime._tasks), sorted(
            t.get_name() for t in keepers
        )
        gc.collect()
        alive = [type(c).__name__ for ref in first if (c := ref()) is not None]
        assert alive == [], f"parts of the first generation still alive after {reloads} reloads: {alive}"
    finally:
        daemon._stop.set()
        await asyncio.wait_for(run, 20)


async def test_the_supervisor_names_a_task_that_does_not_end_when_cancelled():
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # what the 3.11 wait_for did to the parts' loops, every time

    async def polite() -> None:
        await asyncio.Event().wait()

    sup = Supervisor()
    sup.start("stubborn", stubborn)
    sup.start("polite", polite)
    await asyncio.sleep(0)
    (left,) = [t for t in sup._tasks if t.get_name() == "stubborn"]
    with capture_logs() as logs:
        await sup.stop(timeout=0.05, forget=True)
    late = [e for e in logs if e["event"] == "task did not end when cancelled"]
    assert [e["tasks"] for e in late] == [["stubborn"]]
    release.set()
    await asyncio.wait([left], timeout=10)
    assert left.done()
