"""The preemption watcher in-process against the metadata simulator on loopback, and the simulator
as a real subprocess (``training-node-agent metadata-sim``)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import async_wait_until, part_context

from agent.config import parse_config
from agent.core.events import Event, EventBus, InstanceIdentityEvent, PreemptionEvent
from agent.devtools.simprocess import MetadataSimProcess
from agent.devtools.simulator import Simulator, start_simulator
from agent.preemption.watcher import PreemptionWatcher

REPO = Path(__file__).resolve().parents[2]
NETGUARD_DIR = REPO / "tests" / "netguard"
CONNECT_LOG_DIR = Path(__file__).resolve().parent / "connectlog"

# quick enough for tests, slow enough for a 2-core box shared with other suites
FAST = {
    "poll_interval": "100ms",
    "maintenance_interval": "100ms",
    "timeout": "500ms",
    "backoff_max": "300ms",
    "max_requests_per_second": 100,
    "withdraw_after_polls": 2,
}


class Harness:
    """One watcher (``PreemptionWatcher``) on its own bus and state dir, pointed at ``sim``."""

    def __init__(
        self, sim: Simulator | None, state_dir: Path, preemption: dict[str, Any], agent: dict[str, Any]
    ):
        self.sim = sim
        self.state_dir = state_dir
        self.preemption = preemption
        self.agent = agent
        self.events: list[Event] = []
        self.watcher: PreemptionWatcher | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def config(self) -> Any:
        return parse_config(
            {"agent": {"state_dir": str(self.state_dir), **self.agent}, "preemption": self.preemption}
        )

    async def start(self) -> PreemptionWatcher:
        bus = EventBus()
        queue = bus.subscribe("test")
        ctx = part_context(self.config(), bus, self.state_dir)
        self.bus = bus
        self.watcher = PreemptionWatcher(ctx)

        async def collect() -> None:
            while True:
                self.events.append(await queue.get())

        self._tasks = [asyncio.create_task(collect()), asyncio.create_task(self.watcher.run())]
        return self.watcher

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.watcher is not None:
            await self.watcher.stop()

    async def restart(self) -> PreemptionWatcher:
        await self.stop()
        self.events = []
        return await self.start()

    def notices(self, **match: Any) -> list[PreemptionEvent]:
        return [
            e
            for e in self.events
            if isinstance(e, PreemptionEvent) and all(getattr(e, k) == v for k, v in match.items())
        ]

    def identity(self) -> InstanceIdentityEvent | None:
        found = [e for e in self.events if isinstance(e, InstanceIdentityEvent)]
        return found[-1] if found else None

    async def wait(self, pred: Callable[[], Any], timeout: float = 8.0, what: str = "condition") -> Any:
        return await async_wait_until(pred, timeout, what=what, detail=self._status_text)

    def _status_text(self) -> str:
        assert self.watcher is not None
        return f"status={json.dumps(self.watcher.status(), default=str)}"

    async def wait_notice(self, timeout: float = 8.0, **match: Any) -> PreemptionEvent:
        found = await self.wait(lambda: self.notices(**match), timeout, f"notice {match}")
        return found[0]

    async def settle(self, polls: int = 5) -> None:
        """Let every polled source make ``polls`` more reads, counted: on a slow box this waits longer
        rather than testing less. A long-poll source answers only on a change, so it is waited for only
        until its first answer (the one that reads the current state)."""
        assert self.watcher is not None
        watcher = self.watcher
        start = {name: st.reads for name, st in watcher.sources.items()}

        def settled() -> bool:
            return bool(watcher.sources) and all(
                st.reads >= (1 if st.cadence == "long-poll" else start.get(name, 0) + polls)
                for name, st in watcher.sources.items()
            )

        await self.wait(settled, what=f"{polls} more reads from every polled source")

    def outcomes(self) -> dict[str, int]:
        assert self.watcher is not None
        return {outcome: n for (_, outcome), n in self.watcher.counter.counts.items()}


@pytest.fixture
async def harness(tmp_path: Path):
    """``await harness("alibaba", require_token=False, **preemption_overrides)`` -> a started Harness."""
    made: list[Harness] = []
    sims: list[Simulator] = []

    async def make(
        provider: str,
        *,
        require_token: bool = False,
        simulate: bool = True,
        agent: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> Harness:
        sim = None
        pre: dict[str, Any] = {"provider": provider, **FAST}
        if simulate:
            sim = await start_simulator(provider, require_token=require_token)
            sims.append(sim)
            pre["endpoint"] = sim.url
        pre.update(overrides)
        h = Harness(sim, tmp_path / f"state{len(made)}", pre, agent or {})
        made.append(h)
        await h.start()
        return h

    yield make
    for h in made:
        await h.stop()
    for sim in sims:
        await sim.close()


# --- the simulator as a subprocess ----------------------------------------------------------------


@pytest.fixture
def sim_process(tmp_path: Path):
    """``sim_process("aws", "--require-token")`` -> a started :class:`MetadataSimProcess`."""
    started: list[MetadataSimProcess] = []

    def make(provider: str, *args: str) -> MetadataSimProcess:
        p = MetadataSimProcess(tmp_path / f"sim-{provider}.log", provider, *args)
        started.append(p)
        return p

    yield make
    for p in started:
        p.stop()


def guarded_env(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    """Environment for a daemon subprocess that records every non-local connect the suite's guard
    blocks (``blocked``) and every IP connect at all, loopback included (``connects``)."""
    blocked = tmp_path / "netguard-blocked.log"
    connects = tmp_path / "connects.log"
    blocked.touch()
    connects.touch()
    env = {
        "TNA_NETGUARD_LOG": str(blocked),
        "TNA_CONNECT_LOG": str(connects),
        "PYTHONPATH": os.pathsep.join([str(CONNECT_LOG_DIR), str(NETGUARD_DIR)]),
    }
    return env, blocked, connects
