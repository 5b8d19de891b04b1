"""What the daemon needs from each long-running part (preemption watcher, checkpoint, classifier,
alerts), and the hooks a part may offer besides. Parts never import each other: they talk through
the event bus and read snapshots through the context (``agent.context``).

A hook is a protocol the part's class names among its bases (``class X(HasStatus, HasMetrics)``):
the daemon finds it by ``isinstance``, mypy checks the signature, and a misspelt method leaves the
protocol's abstract one in place, so the class cannot be instantiated (mypy says so too).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from aiohttp import web
from prometheus_client.core import Metric

Route = tuple[str, str, Callable[[web.Request], Any]]  # (method, path, async handler)


class Component(Protocol):
    """A supervised part: ``run`` and ``stop``, and any of the hooks below."""

    name: str

    async def run(self) -> None:
        """The part's main loop. Supervised: an exception is logged and the loop restarted with backoff."""

    async def stop(self) -> None:
        """Finish in-flight work within a short deadline (flush queues, persist state)."""


@runtime_checkable
class HasStatus(Protocol):
    @abstractmethod
    def status(self) -> dict[str, Any]:
        """Its section of the status JSON, with an optional ``lines`` list for humans."""


@runtime_checkable
class HasMetrics(Protocol):
    @abstractmethod
    def metrics(self) -> Iterable[Metric]:
        """Its own /metrics families."""


@runtime_checkable
class HasRoutes(Protocol):
    @abstractmethod
    def control_routes(self) -> list[Route]:
        """Its handlers on the control socket."""


@runtime_checkable
class HasPids(Protocol):
    @abstractmethod
    def current_pids(self) -> list[int]:
        """Training processes it found, which the process collector follows."""


@runtime_checkable
class HasVerdictLine(Protocol):
    @abstractmethod
    def verdict_line(self) -> str:
        """Its words in the one-line status systemd shows."""


HOOKS: tuple[type, ...] = (HasStatus, HasMetrics, HasRoutes, HasPids, HasVerdictLine)
