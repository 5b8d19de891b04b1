"""Turns a collector that keeps failing into an event for the alerts, and its recovery into another."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agent.core.events import CollectorFailingEvent, EventBus
from agent.snapshot import NodeSnapshot


class CollectorFailureWatch:
    name = "collector-failures"

    def __init__(self, bus: EventBus, failing_for: Callable[[str], float | None], after: float) -> None:
        self._bus = bus
        self._failing_for = failing_for
        self._after = after
        self._announced: set[str] = set()

    def on_snapshot(self, snap: NodeSnapshot) -> None:
        for name, st in snap.collectors.items():
            failing = self._failing_for(name)
            if failing is not None and failing >= self._after and name not in self._announced:
                self._announced.add(name)
                self._bus.publish(CollectorFailingEvent(name, st.error or "failing", failing))
            elif failing is None and name in self._announced:
                self._announced.discard(name)
                self._bus.publish(CollectorFailingEvent(name, "", 0.0, cleared=True))

    async def run(self) -> None:
        await asyncio.Event().wait()  # all work happens in on_snapshot

    async def stop(self) -> None:
        pass
