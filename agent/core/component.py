"""What the daemon needs from each long-running part (preemption watcher, checkpoint, classifier,
alerts), and what it hands them. Parts never import each other: they talk through the event bus and
read snapshots through the context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from agent.config import Config
from agent.core.events import EventBus
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
    """Besides ``run`` and ``stop`` a part may offer, found by :func:`optional`:
    ``status() -> dict`` (its section of the status, with an optional ``lines`` list for humans),
    ``metrics() -> Iterable[Metric]``, ``control_routes() -> list[Route]``, ``current_pids() -> list[int]``
    (training processes it found, followed by the process collector) and ``verdict_line() -> str``."""

    name: str

    async def run(self) -> None:
        """The part's main loop. Supervised: an exception is logged and the loop restarted with backoff."""

    async def stop(self) -> None:
        """Finish in-flight work within a short deadline (flush queues, persist state)."""


def optional(obj: object, method: str) -> Callable[..., Any] | None:
    fn = getattr(obj, method, None)
    return fn if callable(fn) else None
