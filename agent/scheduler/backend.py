"""The seam between the scheduler action and a cluster's scheduler: what the policy, the health gate
and the reconcile loop know of a node and its jobs, and what a backend must do for them.

A backend is one subclass of :class:`SchedulerBackend` in ``agent/scheduler/backends/<kind>.py``:
defining it declares it (``[scheduler] kind``, ``kind = "auto"``, the status and the alerts' words
read the declarations), and a subclass that leaves a piece out is refused where it is defined, naming
the piece, as a chat channel is (``agent/alerts/services/base.py``). Slurm is the one built in
(``backends/slurm.py``); docs/deploy.md says what a Kubernetes backend would implement.

Ownership stays the policy's, not the backend's: the agent owns a drain whose reason starts with
``tna:``, so a backend stores the reason it is given and reads it back as it was written.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

from agent.core.oneline import one_line

if TYPE_CHECKING:
    from agent.config import Config

REASON_MAX = 120  # schedulers keep more, but sinfo -R's column and an alert line do not


def clean_reason(text: str, limit: int = REASON_MAX) -> str:
    """What goes into a drain reason: one line, no control characters, at most ``limit`` characters."""
    return one_line(text, limit)


class SchedulerError(Exception):
    """A call to the scheduler that failed, timed out or could not be made: one line that says which.
    The reconcile loop retries after it with backoff; any other exception is a bug."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    state: str  # the scheduler's own word, upper case (Slurm: IDLE, ALLOCATED, MIXED, DOWN, ...)
    drained: bool  # no new job starts here (Slurm: drained or draining; Kubernetes: cordoned)
    reason: str  # why, as it was set (without a scheduler's own stamp); "" when none


@dataclass(frozen=True, slots=True)
class JobInfo:
    job_id: str  # "4127", or "4127_3" for an array task
    name: str
    user: str
    requeueable: bool  # the scheduler may start it again elsewhere; else it ends with the node


# the pieces a backend defines itself: two class attributes, then its calls (each raises SchedulerError)
REQUIRED_ATTRS = ("kind", "words")
REQUIRED_CALLS = ("detect", "own_name", "node", "jobs_on", "drain", "resume", "requeue", "cancel")
_DECLARED: dict[str, type[SchedulerBackend]] = {}


class SchedulerBackend:
    """One cluster scheduler, as the scheduler action sees it.

    ``kind``: its ``[scheduler] kind`` value (``SchedulerKind.SLURM`` for the built-in one).
    ``words``: its name in the alerts, English then Chinese. ``order``: its place when
    ``kind = "auto"`` asks each backend's :meth:`detect` in turn (built-ins 10, 20, ...)."""

    kind: ClassVar[str]
    words: ClassVar[tuple[str, str]]
    order: ClassVar[int] = 100

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        lacks = [n for n in REQUIRED_ATTRS if n not in cls.__dict__]
        lacks += [n for n in REQUIRED_CALLS if _defined_by(cls, n) is SchedulerBackend]
        if lacks:
            raise TypeError(f"scheduler backend {cls.__name__} does not define {', '.join(lacks)}")
        _DECLARED[cls.kind] = cls  # the same kind again replaces it: a reloaded module does not fail

    @classmethod
    async def detect(cls, cfg: Config) -> bool:
        """This scheduler runs this node (for ``kind = "auto"``); never raises."""
        raise NotImplementedError

    async def own_name(self) -> str:
        """This node's name in the scheduler, where ``[scheduler] node_name`` is empty;
        SchedulerError saying why when the scheduler cannot tell."""
        raise NotImplementedError

    async def node(self, name: str) -> NodeInfo:
        raise NotImplementedError

    async def jobs_on(self, node: str) -> list[JobInfo]:
        """The jobs running on ``node`` now."""
        raise NotImplementedError

    async def drain(self, node: str, reason: str) -> None:
        """No new job starts on ``node``; ``reason`` is read back by :meth:`node` as given."""
        raise NotImplementedError

    async def resume(self, node: str) -> None:
        raise NotImplementedError

    async def requeue(self, job_ids: list[str]) -> None:
        raise NotImplementedError

    async def cancel(self, job_ids: list[str]) -> None:
        raise NotImplementedError


def _defined_by(cls: type, name: str) -> type:
    return next(k for k in cls.__mro__ if name in k.__dict__)


@cache
def _discover() -> None:
    """Import every ``agent.scheduler.backends.<kind>`` module: each declares its backend."""
    package = importlib.import_module("agent.scheduler.backends")
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"agent.scheduler.backends.{info.name}")


def backends() -> list[type[SchedulerBackend]]:
    _discover()
    return sorted(_DECLARED.values(), key=lambda b: (b.order, b.kind))


def kinds() -> tuple[str, ...]:
    return tuple(b.kind for b in backends())


def backend_class(kind: str) -> type[SchedulerBackend] | None:
    _discover()
    return _DECLARED.get(kind)


def forget(kind: str) -> None:
    _DECLARED.pop(kind, None)


async def detect(cfg: Config) -> type[SchedulerBackend] | None:
    """The first declared backend that says it runs this node, None when none does."""
    for cls in backends():
        if await cls.detect(cfg):
            return cls
    return None
