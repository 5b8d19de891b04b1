"""What the daemon needs from each long-running part (preemption watcher, checkpoint, classifier,
alerts), and what it hands them. Parts never import each other: they talk through the event bus and
read snapshots through the context.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from prometheus_client.core import Metric

from agent.config import Config
from agent.events import EventBus
from agent.snapshot import NodeSnapshot

Route = tuple[str, str, Callable[[web.Request], Any]]  # (method, path, async handler)


@dataclass
class Context:
    cfg: Config
    bus: EventBus
    latest: Callable[[], NodeSnapshot]  # the newest snapshot, never blocks
    state_dir: Path
    runtime_dir: Path
    # called with every new snapshot, on the event loop; parts that need each tick register here
    snapshot_listeners: list[Callable[[NodeSnapshot], None]]


class Component(Protocol):
    name: str

    async def run(self) -> None:
        """The part's main loop. Supervised: an exception is logged and the loop restarted with backoff."""

    async def stop(self) -> None:
        """Finish in-flight work within a short deadline (flush queues, persist state)."""


class HasStatus(Protocol):
    def status(self) -> dict[str, Any]: ...


class HasMetrics(Protocol):
    def metrics(self) -> Iterable[Metric]: ...


class HasControl(Protocol):
    def control_routes(self) -> list[Route]: ...


def optional(obj: object, method: str) -> Callable[..., Any] | None:
    fn = getattr(obj, method, None)
    return fn if callable(fn) else None
