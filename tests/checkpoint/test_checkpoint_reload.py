"""A reload in the middle of acting on a notice: the component is stopped (its tasks cancelled) and
a new one takes over from the episode log. The trainer must get the signal exactly once. Found by the
fault soak (bench/soak.py), where SIGHUP storms near a notice's start left notices unsignalled."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from checkpoint_helpers import Trainer
from conftest import wait_until

from agent.checkpoint.component import CheckpointComponent
from agent.checkpoint.targets import Discovered
from agent.config import parse_config
from agent.context import Context
from agent.core.events import EventBus, PreemptionEvent
from agent.core.vocabulary import EpisodeState
from agent.snapshot import NodeSnapshot


def _context(tmp_path: Path, marker: str) -> Context:
    cfg = parse_config(
        {
            "agent": {"state_dir": str(tmp_path / "state"), "runtime_dir": str(tmp_path / "run")},
            "trainer": {
                "discover": [f"cmdline:{marker}"],
                "request_file": str(tmp_path / "cp" / "r.json"),
                "discovery_file": "none",
            },
        }
    )
    snap = NodeSnapshot(seq=0, timestamp=0.0, monotonic=0.0)
    # each component gets its own bus, as after a reload: the notice is not published again, so the
    # second component has only the episode log to go on
    return Context(cfg, EventBus(), lambda: snap, tmp_path / "state", tmp_path / "run", [])


def test_a_reload_while_discovering_targets_still_signals_once(tmp_path, monkeypatch):
    trainer = Trainer(tmp_path, "t", None, "--keep-going", "--save-seconds", "0.1")
    try:
        asyncio.run(_reload_while_discovering(tmp_path, trainer, monkeypatch))
        wait_until(lambda: trainer.events("signal"), timeout=30, what="the checkpoint signal")
        time.sleep(0.5)  # a second signal, were one sent, has landed by now
        assert len(trainer.events("signal")) == 1, trainer.events()
    finally:
        trainer.stop()


async def _reload_while_discovering(
    tmp_path: Path, trainer: Trainer, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = CheckpointComponent(_context(tmp_path, trainer.marker))
    calls = 0
    never = asyncio.Event()

    async def stuck() -> Discovered:  # a discovery that is still running when the reload comes
        nonlocal calls
        calls += 1
        await never.wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(first.watch, "rediscover", stuck)
    running = asyncio.create_task(first.run())
    now = datetime.now(UTC)
    first.ctx.bus.publish(
        PreemptionEvent(
            provider="alibaba",
            kind="spot-termination",
            event_id="spot-1",
            deadline=now + timedelta(seconds=120),
            received_at=now,
        )
    )
    for _ in range(2000):  # the refresh loop's discovery and the episode's
        if calls >= 2:
            break
        await asyncio.sleep(0.01)
    assert calls >= 2 and "spot-1" in first.episode_log.episodes
    running.cancel()  # what a reload does: the run task cancelled, then stop()
    await asyncio.gather(running, return_exceptions=True)
    await first.stop()

    second = CheckpointComponent(_context(tmp_path, trainer.marker))
    running = asyncio.create_task(second.run())
    try:
        for _ in range(3000):
            ep = second.episode_log.episodes.get("spot-1")
            if ep is not None and ep.phase == EpisodeState.REQUESTED:
                break
            await asyncio.sleep(0.01)
        ep = second.episode_log.episodes["spot-1"]
        assert ep.phase == EpisodeState.REQUESTED, ep
        assert [d["outcome"] for d in ep.deliveries] == ["signalled"], ep
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await second.stop()


def test_a_save_while_the_ledger_loads_waits_for_the_load(tmp_path):
    """A reload stopped the part while its load ran in a worker thread: the stop's save wrote the
    still empty ledger over the file, and the next part signalled a handled notice again."""
    import threading
    from pathlib import PosixPath

    from agent.checkpoint.episodelog import Episode, EpisodeLog

    path = tmp_path / "checkpoint-ledger.json"
    first = EpisodeLog(path)
    first.load()
    now = time.time()
    first.episodes["e1"] = Episode(
        "e1", "alibaba", "spot-termination", now + 600, now, now, phase=EpisodeState.COMPLETED
    )
    first.save()
    reading, go = threading.Event(), threading.Event()

    class SlowPath(PosixPath):
        def read_bytes(self) -> bytes:
            reading.set()
            go.wait(10)
            return super().read_bytes()

    second = EpisodeLog(SlowPath(path))
    loader = threading.Thread(target=second.load)
    loader.start()
    assert reading.wait(10)
    saver = threading.Thread(target=second.save)  # the stop's save, in another worker
    saver.start()
    saver.join(2)  # before the fix it wrote here; now it waits for the load
    go.set()
    loader.join(10)
    saver.join(10)
    third = EpisodeLog(path)
    third.load()
    assert list(third.episodes) == ["e1"]
    assert third.episodes["e1"].phase == EpisodeState.COMPLETED
