"""What every cloud module shares: the shape of a notice source, RFC 3339 parsing and the
plausibility window for deadlines (the errors a read can end in are ``wire.py``'s).

A provider module (alibaba.py, aws.py ...) holds pure parsers (body text in, typed values out) and a
:class:`Provider` subclass that reads its cloud's paths through a :class:`MetadataClient` and turns the
parsed values into :class:`~agent.core.events.PreemptionEvent` objects.
"""

from __future__ import annotations

import email.utils
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, ClassVar

from agent.core.events import InstanceIdentityEvent, PreemptionEvent
from agent.core.vocabulary import Cadence
from agent.preemption.wire import BodyFormatError, TokenScheme

if TYPE_CHECKING:
    from agent.config.preemption import PreemptionSection
    from agent.preemption.client import MetadataClient


class TimeFormatError(ValueError):
    """A time string that does not match the format the cloud documents."""


# The shapes the clouds document; the standard library reads the values. fromisoformat alone would
# take more than RFC 3339 (week dates, ordinal days, a missing zone), parsedate more than RFC 1123
# (unknown zones, two-digit years), so each format is matched strictly first.
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:?\d{2})?$")
_RFC1123 = re.compile(
    r"^(?:(Mon|Tue|Wed|Thu|Fri|Sat|Sun), )?\d{1,2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4}"
    r" \d{2}:\d{2}:\d{2} (GMT|UTC)$"
)


def parse_iso_time(text: str, assume: timezone | None = None) -> datetime:
    """RFC 3339 / ISO 8601 ``2015-01-05T18:02:00Z`` -> aware UTC datetime.

    A time without a zone is refused unless ``assume`` names the zone the cloud documents for it
    (Tencent's ``2018-08-18 12:05:33`` is UTC+8)."""
    t = text.strip()
    m = _RFC3339.match(t)
    if not m:
        raise TimeFormatError(f"not an RFC 3339 time: {t[:80]!r}")
    frac = m.group(1)
    if frac and len(frac) > 7:  # fromisoformat reads 1-6 digits; RFC 3339 allows more: truncate
        t = t.replace(frac, frac[:7], 1)
    try:
        when = datetime.fromisoformat(t.upper())  # 3.11 reads "Z"; "z" and "t" are RFC 3339 too
    except ValueError as e:
        raise TimeFormatError(f"impossible time {t!r}: {e}") from None
    if when.tzinfo is None:
        if assume is None:
            raise TimeFormatError(f"time without a zone: {t!r}")
        when = when.replace(tzinfo=assume)
    return when.astimezone(UTC)


def parse_rfc1123(text: str, weekday: bool = True) -> datetime:
    """``Mon, 19 Sep 2016 18:29:47 GMT`` -> aware UTC datetime. With ``weekday=False`` the day name is
    left out, as AWS writes it (Go's ``2 Jan 2006 15:04:05 GMT``)."""
    t = text.strip()
    m = _RFC1123.match(t)
    example = "Mon, 19 Sep 2016 18:29:47 GMT" if weekday else "21 Jan 2019 09:00:43 GMT"
    if not m or (m.group(1) is None) == weekday:
        raise TimeFormatError(f'not an RFC 1123 time like "{example}": {t[:80]!r}')
    try:
        return email.utils.parsedate_to_datetime(t).astimezone(UTC)
    except (ValueError, TypeError) as e:
        raise TimeFormatError(f"impossible time {t!r}: {e}") from None


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
class NoticeSource:
    """One metadata path (or group of paths) read on its own schedule.

    ``cadence`` FAST sources are read every ``poll_interval`` (spot notices), SLOW ones every
    ``maintenance_interval`` (maintenance lists announced hours ahead). A source with ``long_poll``
    is driven by the cloud's change notification instead (GCP ``wait_for_change``)."""

    name: str
    read: Callable[[], Awaitable[Reading]]
    cadence: Cadence = Cadence.FAST
    long_poll: LongPoll | None = None


class Provider:
    """Base for one cloud. Subclasses set ``name``, ``base_url``, ``kinds`` and implement
    :meth:`sources` and :meth:`identity`."""

    name: ClassVar[str]
    base_url: ClassVar[str]
    kinds: ClassVar[tuple[str, ...]]
    token: ClassVar[TokenScheme | None] = None  # session-token scheme, if the cloud has one
    headers: ClassVar[dict[str, str]] = {}  # sent with every request
    # whether the node can tell the cloud "ready, go ahead" before the deadline (Azure's StartRequests)
    can_acknowledge: ClassVar[bool] = False

    def __init__(self, client: MetadataClient, cfg: PreemptionSection) -> None:
        self.client = client
        self.cfg = cfg
        self.instance: InstanceIdentityEvent | None = None

    def reading(self) -> Reading:
        return Reading(self.name, datetime.now(UTC), self.cfg.max_deadline_ahead)

    def sources(self) -> list[NoticeSource]:
        raise NotImplementedError

    async def identity(self) -> InstanceIdentityEvent:
        raise NotImplementedError

    @classmethod
    def acknowledges_after_checkpoint(cls, cfg: PreemptionSection) -> bool:
        """Whether a confirmed checkpoint should acknowledge the notice at once (config decides)."""
        return False

    async def acknowledge(self, event_id: str) -> None:
        """Approve ``event_id`` now; only where :attr:`can_acknowledge`. Raises MetadataError when the
        service refuses."""
        raise NotImplementedError(f"{self.name} notices cannot be acknowledged")

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
        ``MetadataError(RequestOutcome.BAD_BODY)``."""
        resp = await self.client.request("GET", path, parse=parse, **kw)
        return None if resp.status == 404 else resp.parsed


def first_line(text: str | None) -> str | None:
    """Identity values are one short line; anything else (an HTML error page) is not one."""
    if not text:
        return None
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line if line and len(line) <= 200 and "<" not in line else None
