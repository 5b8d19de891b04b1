"""What every cloud module shares: the shape of a notice source, the errors a read can end in,
RFC 3339 parsing and the plausibility window for deadlines.

A provider module (alibaba.py, aws.py ...) holds pure parsers (body text in, typed values out) and a
:class:`Provider` subclass that reads its cloud's paths through a :class:`MetadataClient` and turns the
parsed values into :class:`~agent.core.events.PreemptionEvent` objects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from agent.core.events import InstanceIdentityEvent, PreemptionEvent

if TYPE_CHECKING:
    from agent.config.preemption import PreemptionSection
    from agent.preemption.client import MetadataClient, TokenScheme


class MetadataError(Exception):
    """A read that gave no usable answer. ``outcome`` is the label counted in
    ``training_node_metadata_requests_total`` (timeout, connection_error, server_error, ...)."""

    def __init__(self, outcome: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.status = status


class BodyFormatError(ValueError):
    """A response body that is not what the path serves (garbage, truncated JSON, wrong shape)."""


class TimeFormatError(ValueError):
    """A time string that does not match the format the cloud documents."""


MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:?\d{2})?$"
)


def parse_iso_time(text: str, assume: timezone | None = None) -> datetime:
    """RFC 3339 / ISO 8601 ``2015-01-05T18:02:00Z`` -> aware UTC datetime.

    A time without a zone is refused unless ``assume`` names the zone the cloud documents for it
    (Tencent's ``2018-08-18 12:05:33`` is UTC+8)."""
    m = _RFC3339.match(text.strip())
    if not m:
        raise TimeFormatError(f"not an RFC 3339 time: {text.strip()[:80]!r}")
    year, mon, day, hh, mm, ss = (int(g) for g in m.groups()[:6])
    frac, zone = m.group(7), m.group(8)
    if zone is None:
        if assume is None:
            raise TimeFormatError(f"time without a zone: {text.strip()!r}")
        tz: timezone = assume
    elif zone in ("Z", "z"):
        tz = UTC
    else:
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    micro = int((frac[1:] + "000000")[:6]) if frac else 0
    try:
        return datetime(year, mon, day, hh, mm, ss, micro, tzinfo=tz).astimezone(UTC)
    except (ValueError, OverflowError) as e:
        raise TimeFormatError(f"impossible time {text.strip()!r}: {e}") from None


def first_time(text: str, *parsers: Callable[[str], datetime]) -> tuple[datetime | None, str | None]:
    """``text`` read by the first of ``parsers`` that can, and no problem; when none can: no time, and
    what the first parser (the format the cloud documents; the others are leniencies) said."""
    problem = None
    for parse in parsers:
        try:
            return parse(text), None
        except TimeFormatError as e:
            problem = problem or str(e)
    return None, problem


def parse_json(body: str, what: str) -> Any:
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        raise BodyFormatError(f"{what} is not JSON ({e.msg} at {e.pos})") from None


def parse_json_object(body: str, what: str) -> dict[str, Any]:
    doc = parse_json(body, what)
    if not isinstance(doc, dict):
        raise BodyFormatError(f"{what} is not a JSON object")
    return doc


PAST_LIMIT = timedelta(days=1)


@dataclass
class Reading:
    """What one read of one source saw: the notices present now (and ones the cloud marks withdrawn),
    plus warnings about input it could only partly understand."""

    provider: str
    received_at: datetime
    max_ahead: float
    notices: list[PreemptionEvent] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def add(
        self,
        kind: str,
        event_id: str | None,
        deadline: datetime | None,
        raw: str,
        *,
        withdrawn: bool = False,
        time_problem: str | None = None,
    ) -> None:
        """Record one notice. ``event_id`` is the cloud's own id; None where it gives none (spot and
        rebalance notices): the tracker then knows the notice by its source and kind. A deadline
        outside [now - 1 day, now + max_deadline_ahead] is dropped (the notice stays, "deadline
        unknown" means act now) and said in a warning; so is a ``time_problem``, unless the notice
        is withdrawn (its time no longer matters)."""
        what = f"{kind} {event_id}" if event_id else kind
        if time_problem and not withdrawn:
            self.warnings.append(f"{what}: {time_problem}; deadline unknown")
        if deadline is not None and not withdrawn:  # ended events may lie far in the past
            ahead = (deadline - self.received_at).total_seconds()
            if ahead > self.max_ahead or -ahead > PAST_LIMIT.total_seconds():
                self.warnings.append(
                    f"{what}: implausible deadline {deadline.isoformat()} "
                    f"({ahead:+.0f} s from now); deadline unknown"
                )
                deadline = None
        self.notices.append(
            PreemptionEvent(
                provider=self.provider,
                kind=kind,
                event_id=event_id or "",
                deadline=deadline,
                received_at=self.received_at,
                raw=raw[:4000],
                withdrawn=withdrawn,
            )
        )


LongPoll = Callable[[str | None], Awaitable[tuple[Reading, str | None]]]


@dataclass(frozen=True)
class Source:
    """One metadata path (or group of paths) read on its own schedule.

    ``cadence`` "fast" sources are read every ``poll_interval`` (spot notices), "slow" ones every
    ``maintenance_interval`` (maintenance lists announced hours ahead). A source with ``long_poll``
    is driven by the cloud's change notification instead (GCP ``wait_for_change``)."""

    name: str
    read: Callable[[], Awaitable[Reading]]
    cadence: Literal["fast", "slow"] = "fast"
    long_poll: LongPoll | None = None


class Provider:
    """Base for one cloud. Subclasses set ``name``, ``base_url``, ``kinds`` and implement
    :meth:`sources` and :meth:`identity`."""

    name: ClassVar[str]
    base_url: ClassVar[str]
    kinds: ClassVar[tuple[str, ...]]
    token: ClassVar[TokenScheme | None] = None  # session-token scheme, if the cloud has one
    headers: ClassVar[dict[str, str]] = {}  # sent with every request

    def __init__(self, client: MetadataClient, cfg: PreemptionSection) -> None:
        self.client = client
        self.cfg = cfg
        self.instance: InstanceIdentityEvent | None = None

    def reading(self) -> Reading:
        return Reading(self.name, datetime.now(UTC), self.cfg.max_deadline_ahead)

    def sources(self) -> list[Source]:
        raise NotImplementedError

    async def identity(self) -> InstanceIdentityEvent:
        raise NotImplementedError

    async def identity_from_paths(self, paths: dict[str, str]) -> InstanceIdentityEvent:
        """One plain-text path per identity field (Alibaba, Tencent)."""
        values = {name: await self.fetch(path, first_line) for name, path in paths.items()}
        return InstanceIdentityEvent(provider=self.name, **values)

    def identity_from_document(self, doc: dict[str, Any], **keys: str) -> InstanceIdentityEvent:
        """Identity fields from one JSON document (AWS, Azure): ``instance_id="instanceId"``, ...;
        a key that is absent or empty gives None."""
        values = {name: str(doc[key]) if doc.get(key) else None for name, key in keys.items()}
        return InstanceIdentityEvent(provider=self.name, **values)

    async def fetch(self, path: str, parse: Callable[[str], Any] = str.strip, **kw: Any) -> Any:
        """``parse(body)`` of ``path``; None on 404 (nothing there). A body ``parse`` refuses raises
        MetadataError("bad_body")."""
        resp = await self.client.request("GET", path, parse=parse, **kw)
        return None if resp.status == 404 else resp.parsed


def first_line(text: str | None) -> str | None:
    """Identity values are one short line; anything else (an HTML error page) is not one."""
    if not text:
        return None
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line if line and len(line) <= 200 and "<" not in line else None
