"""A reload in the middle of acting on a notice: the component is stopped (its tasks cancelled) and
a new one takes over from the ledger. The trainer must get the signal exactly once. Found by the
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
from agent.core.component import Context
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
    # second component has only the ledger to go on
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
    assert calls >= 2 and "spot-1" in first.ledger.episodes
    running.cancel()  # what a reload does: the run task cancelled, then stop()
    await asyncio.gather(running, return_exceptions=True)
    await first.stop()

    second = CheckpointComponent(_context(tmp_path, trainer.marker))
    running = asyncio.create_task(second.run())
    try:
        for _ in range(3000):
            ep = second.ledger.episodes.get("spot-1")
            if ep is not None and ep.phase == EpisodeState.REQUESTED:
                break
            await asyncio.sleep(0.01)
        ep = second.ledger.episodes["spot-1"]
        assert ep.phase == EpisodeState.REQUESTED, ep
        assert [d["outcome"] for d in ep.deliveries] == ["signalled"], ep
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await second.stop()
