"""The metadata simulator's records: an event it serves (a notice or a maintenance event), a fault
it injects, and the bounded numbers its control API takes. :mod:`simstate` keeps them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from agent.devtools.simwords import SimEventState, SimFault

FAULT_KINDS = tuple(SimFault)
GARBAGE = b"\x89PNG\r\n\x1a\n\x00\xff\xfe<html><body>{not json\x00" + bytes(range(128, 256))


@dataclass
class SimEvent:
    """A notice (spot, rebalance, preempt) or a maintenance event, as the simulator holds it."""

    id: str
    kind: str  # a notice kind (spot-termination ...) or a maintenance word (reboot, migrate ...)
    maintenance: bool
    seconds: float  # deadline = announce time + seconds
    announce_at_wall: float
    time_text: str | None = None  # served instead of the formatted deadline (bad-input rehearsals)
    code: str | None = None  # the cloud's own code, overriding the kind's usual one
    resources: list[str] | None = None  # Azure: the VMs the event is for
    state: str = SimEventState.PENDING
    started: bool = False  # Azure StartRequests approved it (Alibaba: executing)
    announced_at: datetime | None = None
    announced_wall: float | None = None
    announced_monotonic: float | None = None
    ended_wall: float | None = None
    ended_monotonic: float | None = None
    # recomputed on every read, like amazon-ec2-metadata-mock's default spot mode: the deadline is the
    # time of the request + ``seconds``, and a rebalance's noticeTime the time of the request
    moving: bool = False

    @property
    def deadline(self) -> datetime:
        if self.moving:
            return datetime.now(UTC) + timedelta(seconds=self.seconds)
        start = self.announced_at or datetime.fromtimestamp(self.announce_at_wall, UTC)
        return start + timedelta(seconds=self.seconds)

    @property
    def issued_at(self) -> datetime:
        """When the cloud says it issued the notice (AWS rebalance ``noticeTime``)."""
        if self.moving:
            return datetime.now(UTC)
        return self.announced_at or self.deadline

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "maintenance": self.maintenance,
            "state": self.state,
            "started": self.started,
            "seconds": self.seconds,
            "deadline": self.deadline.isoformat(),
            "time_text": self.time_text,
            "moving": self.moving,
            "code": self.code,
            "resources": self.resources,
            "announce_at_wall": self.announce_at_wall,
            "announced_wall": self.announced_wall,
            "announced_monotonic": self.announced_monotonic,
            "ended_wall": self.ended_wall,
            "ended_monotonic": self.ended_monotonic,
        }


@dataclass
class Fault:
    id: int
    kind: str
    status: int = 500
    delay: float = 3.0
    size: int = 8 * 1024 * 1024
    path: str = ""  # prefix of the metadata paths it hits ("" = all, the token endpoint included)
    method: str = ""  # "" = any
    count: int | None = None  # requests left to hit; None = until cleared or expired
    until_monotonic: float | None = None
    hits: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items()}


def number(
    spec: dict[str, Any], key: str, default: float, lo: float = 0.0, hi: float = 10 * 365 * 86400
) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise ValueError(f"{key} must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)
