"""Events are data: frozen dataclasses handed from sources to actions through the :class:`EventBus`.

Sources publish; actions (checkpoint, alerts, exporter state) subscribe. Nobody calls anybody else.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, ClassVar

from agent.core.vocabulary import SPOT_KINDS, AgentPhase, CheckpointPhase, GpuFault


@dataclass(frozen=True, slots=True)
class Event:
    kind_name: ClassVar[str] = "event"


@dataclass(frozen=True, slots=True)
class PreemptionEvent(Event):
    """One normalized cloud notice: spot termination, rebalance or a maintenance event.

    ``withdrawn`` is True on the event that announces the cloud took the notice back.
    """

    kind_name: ClassVar[str] = "preemption"
    provider: str  # a Cloud
    kind: str  # a NoticeKind; a drill may name any kind that looks like one
    event_id: str  # the provider's own id, or a stable hash of the payload
    deadline: datetime | None  # UTC; None when the cloud gives none (GCP preempted=TRUE: now)
    received_at: datetime  # UTC
    raw: str = ""
    withdrawn: bool = False
    drill: bool = False
    # True when re-published from the watcher's state after an agent restart: the notice was announced
    # before; consumers with their own exactly-once store may use it to restore pending work
    replayed: bool = False

    @property
    def seconds_remaining(self) -> float | None:
        """Remaining time at receipt."""
        if self.deadline is None:
            return None
        return (self.deadline - self.received_at).total_seconds()

    def remaining_now(self, now: datetime | None = None) -> float | None:
        if self.deadline is None:
            return None
        return (self.deadline - (now or datetime.now(UTC))).total_seconds()

    @property
    def is_spot(self) -> bool:
        return self.kind in SPOT_KINDS


@dataclass(frozen=True, slots=True)
class InstanceIdentityEvent(Event):
    """Who this node is, as the cloud's metadata service says (read once by the watcher)."""

    kind_name: ClassVar[str] = "instance"
    provider: str
    instance_id: str | None = None
    instance_type: str | None = None
    region: str | None = None
    zone: str | None = None
    market: str | None = None  # a Market, where the metadata service says (AWS, GCP)


@dataclass(frozen=True, slots=True)
class CheckpointEvent(Event):
    """One step of the checkpoint handshake (see :class:`~agent.core.vocabulary.CheckpointPhase`)."""

    kind_name: ClassVar[str] = "checkpoint"
    phase: CheckpointPhase
    event_id: str
    notice_kind: str
    deadline: datetime | None
    at: datetime = field(default_factory=lambda: datetime.now(UTC))
    duration_seconds: float | None = None
    targets: tuple[str, ...] = ()  # "pid 1234 (python)" descriptions
    detail: str = ""
    drill: bool = False


@dataclass(frozen=True, slots=True)
class VerdictEvent(Event):
    """A bottleneck verdict that started or cleared (``cleared`` True)."""

    kind_name: ClassVar[str] = "verdict"
    verdict: str  # a Verdict
    sub_reason: str | None  # a DataSubReason for ``data``
    reasons: tuple[str, ...]
    hint: str
    since: datetime
    scores: dict[str, float] = field(default_factory=dict)
    gpus: tuple[int, ...] = ()
    cleared: bool = False
    previous: str | None = None


@dataclass(frozen=True, slots=True)
class GoodputDigestEvent(Event):
    """The goodput ledger over a period (the daily digest): where the GPU-seconds and the money went."""

    kind_name: ClassVar[str] = "goodput"
    since: datetime
    until: datetime
    ratio: float | None
    gpu_seconds: float
    buckets: dict[str, float] = field(default_factory=dict)  # bucket -> GPU-seconds
    currency: str | None = None
    cost: float | None = None
    wasted: float | None = None
    top_waste: str | None = None
    remedy: str = ""
    cadence: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class JobAdviceEvent(Event):
    """A job ended: what bound it and which instance to rent for it next time (agent.advice), for the
    channels that take ``goodput`` messages."""

    kind_name: ClassVar[str] = "job_advice"
    job: str
    binds: str
    lines: tuple[str, ...] = ()
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True, slots=True)
class GpuFaultEvent(Event):
    """A GPU fault; ``cleared`` when a sustained state (throttling, a lost GPU) ends."""

    kind_name: ClassVar[str] = "gpu_fault"
    fault: GpuFault
    gpu: int | None  # NVML's index; None for a kernel-log Xid at an address NVML has not named
    uuid: str
    model: str
    detail: str = ""
    xid: int | None = None
    at: datetime = field(default_factory=lambda: datetime.now(UTC))
    cleared: bool = False
    pci_bus_id: str = ""

    @property
    def gpu_name(self) -> str:
        """How the GPU is named in words and keys: its index, else its PCI address."""
        return str(self.gpu) if self.gpu is not None else self.pci_bus_id


@dataclass(frozen=True, slots=True)
class SchedulerEvent(Event):
    """The scheduler action needs an operator: jobs that cannot be requeued, or the scheduler failing
    (``cleared`` when it answers again). Once per reclaim, once per outage."""

    kind_name: ClassVar[str] = "scheduler"
    problem: str  # a SchedulerProblem
    node: str  # the node's name in the scheduler
    scheduler: str = ""  # its backend's kind ("slurm"); "" where none was set up
    scheduler_words: tuple[str, str] | None = None  # its name in the alerts (English, Chinese)
    detail: str = ""
    jobs: tuple[str, ...] = ()  # "job 4127 `llama-7b` (alice)"
    event_id: str = ""  # the notice's, for a reclaim
    at: datetime = field(default_factory=lambda: datetime.now(UTC))
    cleared: bool = False


@dataclass(frozen=True, slots=True)
class CollectorFailingEvent(Event):
    kind_name: ClassVar[str] = "collector_failing"
    collector: str
    error: str
    failing_for_seconds: float
    cleared: bool = False


@dataclass(frozen=True, slots=True)
class AgentLifecycleEvent(Event):
    kind_name: ClassVar[str] = "agent"
    phase: AgentPhase
    version: str
    detail: str = ""


class EventBus:
    """In-process fan-out. Each subscriber gets its own bounded queue, so one slow consumer cannot stall
    the publisher or the others; when a subscriber's queue is full the oldest event is dropped and
    counted (``dropped``)."""

    def __init__(self, maxsize: int = 1000) -> None:
        self._subs: list[tuple[str, asyncio.Queue[Event], tuple[type[Event], ...] | None]] = []
        self._maxsize = maxsize
        self.dropped: dict[str, int] = {}
        self.published = 0

    def subscribe(self, name: str, types: tuple[type[Event], ...] | None = None) -> asyncio.Queue[Event]:
        q: asyncio.Queue[Event] = asyncio.Queue(self._maxsize)
        self._subs.append((name, q, types))
        return q

    @property
    def subscribers(self) -> list[str]:
        """Each subscriber's name, once, in subscription order."""
        return list(dict.fromkeys(name for name, _, _ in self._subs))

    @property
    def subscriber_count(self) -> int:
        return len(self._subs)

    def unsubscribe_from(self, index: int) -> None:
        """Drop the subscriptions made since ``subscriber_count`` was ``index`` (parts stopped on reload)."""
        del self._subs[index:]

    def publish(self, event: Event) -> None:
        self.published += 1
        for name, q, types in self._subs:
            if types is not None and not isinstance(event, types):
                continue
            if q.full():
                q.get_nowait()
                self.dropped[name] = self.dropped.get(name, 0) + 1
            q.put_nowait(event)


def event_to_dict(event: Event) -> dict[str, Any]:
    """JSON-friendly form for status, logs and the spool."""
    out: dict[str, Any] = {"type": event.kind_name}
    for f in fields(event):
        name = f.name
        value = getattr(event, name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    if isinstance(event, PreemptionEvent):
        out["seconds_remaining"] = event.seconds_remaining
    return out
