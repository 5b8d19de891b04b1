"""Long-running tasks restarted with backoff when they crash; the daemon itself keeps running."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from agent.core.backoff import Backoff

log = structlog.get_logger("supervisor")


@dataclass
class TaskState:
    name: str
    restarts: int = 0
    last_error: str | None = None
    running: bool = False


@dataclass
class Supervisor:
    min_backoff: float = 0.5
    max_backoff: float = 30.0
    states: dict[str, TaskState] = field(default_factory=dict)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self, name: str, factory: Callable[[], Awaitable[None]]) -> None:
        state = self.states.setdefault(name, TaskState(name))
        self._tasks.append(asyncio.create_task(self._keep(state, factory), name=name))

    async def _keep(self, state: TaskState, factory: Callable[[], Awaitable[None]]) -> None:
        backoff = Backoff(self.min_backoff, self.max_backoff)
        while True:
            started = time.monotonic()
            state.running = True
            try:
                await factory()
                state.running = False
                return  # finished on its own: nothing to restart
            except asyncio.CancelledError:
                state.running = False
                raise
            except Exception as e:
                state.running = False
                state.restarts += 1
                state.last_error = f"{type(e).__name__}: {e}"[:300]
                if time.monotonic() - started > 60:
                    backoff.reset()  # it ran fine for a while: start the backoff over
                delay = backoff.next()
                log.error(
                    "task crashed; restarting",
                    task=state.name,
                    restart_in=round(delay, 2),
                    restarts=state.restarts,
                    exc_info=e,
                )
                await asyncio.sleep(delay)

    async def stop(self, timeout: float = 3.0, forget: bool = False) -> None:
        """Cancel every task; ``forget`` also drops their states (a reload builds new parts, and one
        it removed must not linger in status as a task that is not running)."""
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=timeout)
        # left to finish on their own; one that never does (it swallowed the cancel) keeps whatever
        # it holds alive for good, so it is named
        late = sorted(t.get_name() for t in self._tasks if not t.done())
        if late:
            log.warning("task did not end when cancelled", tasks=late, waited=timeout)
        self._tasks.clear()
        if forget:
            self.states.clear()
