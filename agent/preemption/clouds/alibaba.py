"""Alibaba Cloud ECS: spot termination time, active system (maintenance) events, hardened-mode tokens.

Paths (base ``http://100.100.100.200``):

- ``/latest/meta-data/instance/spot/termination-time``: 404 while nothing is scheduled, else a UTC time
  like ``2015-01-05T18:02:00Z`` about five minutes ahead.
- ``/latest/maintenance/active-system-events``: the instance's active system events. Its schema is not
  documented, so :func:`parse_active_system_events` accepts a list or an object holding a list, and
  per event the keys ECS's API uses (``EventId``, ``EventType``/``Code``, ``EventCycleStatus``/``Status``,
  ``NotBefore``) in any case or spelling; the raw text always travels in the event.
- Hardened mode: ``PUT /latest/api/token`` with ``X-aliyun-ecs-metadata-token-ttl-seconds`` (1-21600),
  then ``X-aliyun-ecs-metadata-token`` on every read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent.core.events import InstanceIdentityEvent
from agent.core.vocabulary import Cadence, Cloud, NoticeKind
from agent.preemption.dmi import DmiRule
from agent.preemption.provider import (
    NoticeSource,
    Provider,
    Reading,
    TimeFormatError,
    first_time,
    parse_iso_time,
    parse_json,
)
from agent.preemption.registry import CloudSpec, NoticeWindow, declare
from agent.preemption.wire import BodyFormatError, TokenScheme

SPOT_PATH = "/latest/meta-data/instance/spot/termination-time"
EVENTS_PATH = "/latest/maintenance/active-system-events"
TOKEN = TokenScheme(
    "/latest/api/token", "X-aliyun-ecs-metadata-token-ttl-seconds", "X-aliyun-ecs-metadata-token"
)
IDENTITY_PATHS = {
    "instance_id": "/latest/meta-data/instance-id",
    "instance_type": "/latest/meta-data/instance/instance-type",
    "region": "/latest/meta-data/region-id",
    "zone": "/latest/meta-data/zone-id",
}
# statuses (ECS's EventCycleStatus) that mean the event will not happen or is over
ENDED = {"canceled", "cancelled", "avoided", "executed", "failed", "completed"}


@dataclass(frozen=True, slots=True)
class SpotTermination:
    time: datetime
    text: str
    warning: str | None = None


def parse_spot_termination(body: str) -> SpotTermination:
    """The termination-time body. Alibaba documents UTC with ``Z``; a zone-less time is read as UTC
    with a warning. Anything that is not a time at all raises :class:`BodyFormatError`."""
    text = body.strip()
    if not text:
        raise BodyFormatError("empty termination-time body")
    try:
        return SpotTermination(parse_iso_time(text), text)
    except TimeFormatError as strict:
        try:
            return SpotTermination(parse_iso_time(text, assume=UTC), text, f"{strict}; read as UTC")
        except TimeFormatError:
            raise BodyFormatError(f"termination-time is not a time: {text[:80]!r}") from None


def _read_as_utc(text: str) -> datetime:
    return parse_iso_time(text, assume=UTC)


@dataclass(frozen=True, slots=True)
class SystemEvent:
    code: str
    event_id: str | None
    status: str | None
    not_before: datetime | None
    not_before_text: str | None
    time_problem: str | None
    raw: str


def _norm(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "")


def _pick(item: dict[str, Any], *names: str) -> Any:
    keys = {_norm(k): v for k, v in item.items()}
    for name in names:
        if name in keys and keys[name] not in (None, ""):
            return keys[name]
    return None


def _name_of(value: Any) -> str | None:
    """ECS nests codes as ``{"Code": 1, "Name": "SystemMaintenance.Reboot"}``; accept both forms."""
    if isinstance(value, dict):
        value = _pick(value, "name", "code", "value")
    if value is None:
        return None
    return str(value).strip() or None


def _event_items(doc: Any) -> list[Any]:
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict):
        if _pick(doc, "eventtype", "code", "eventcode", "eventid", "name"):
            return [doc]  # one event on its own
        for value in doc.values():
            if isinstance(value, list):
                return value
            if isinstance(value, dict):
                inner = _event_items(value)
                if inner:
                    return inner
        return []
    raise BodyFormatError(f"active-system-events is a JSON {type(doc).__name__}, not a list or object")


def parse_active_system_events(body: str) -> list[SystemEvent]:
    """Defensive parse of the active-system-events body (see the module doc). An empty body, ``[]``
    or ``{}`` mean no events; items that are not objects are skipped."""
    text = body.strip()
    if not text:
        return []
    doc = parse_json(text, "active-system-events")
    out: list[SystemEvent] = []
    for item in _event_items(doc):
        if not isinstance(item, dict):
            continue
        code = (
            _name_of(_pick(item, "eventtype", "code", "eventcode", "eventname", "name", "type")) or "unknown"
        )
        status = _name_of(_pick(item, "eventcyclestatus", "eventstatus", "status", "state"))
        when = _pick(item, "notbefore", "plannedexecutetime", "executetime", "eventtime", "time")
        not_before, problem = None, None
        if when is not None:
            not_before, problem = first_time(str(when), parse_iso_time, _read_as_utc)
        event_id = _pick(item, "eventid", "id")
        out.append(
            SystemEvent(
                code=code,
                event_id=str(event_id) if event_id is not None else None,
                status=status,
                not_before=not_before,
                not_before_text=str(when) if when is not None else None,
                time_problem=problem,
                raw=json.dumps(item, sort_keys=True, ensure_ascii=False),
            )
        )
    return out


def maintenance_kind(code: str) -> str:
    """``SystemMaintenance.Reboot`` -> ``maintenance-reboot``; the action is the part after the dot."""
    action = code.rsplit(".", 1)[-1].lower()
    for prefix, kind in (
        ("reboot", NoticeKind.MAINTENANCE_REBOOT),
        ("redeploy", NoticeKind.MAINTENANCE_REDEPLOY),
        ("stop", NoticeKind.MAINTENANCE_STOP),
        ("delete", NoticeKind.MAINTENANCE_TERMINATE),
        ("release", NoticeKind.MAINTENANCE_TERMINATE),
    ):
        if action.startswith(prefix):
            return kind
    return NoticeKind.MAINTENANCE_OTHER


class AlibabaProvider(Provider):
    name = Cloud.ALIBABA
    base_url = "http://100.100.100.200"
    kinds = (
        NoticeKind.SPOT_TERMINATION,
        NoticeKind.MAINTENANCE_REBOOT,
        NoticeKind.MAINTENANCE_REDEPLOY,
        NoticeKind.MAINTENANCE_STOP,
        NoticeKind.MAINTENANCE_TERMINATE,
        NoticeKind.MAINTENANCE_OTHER,
    )
    token = TOKEN

    def sources(self) -> list[NoticeSource]:
        return [
            NoticeSource("spot", self.read_spot),
            NoticeSource("maintenance", self.read_events, cadence=Cadence.SLOW),
        ]

    async def read_spot(self) -> Reading:
        spot = await self.fetch(SPOT_PATH, parse_spot_termination)
        reading = self.reading()
        if spot is None:
            return reading
        if spot.warning:
            reading.warnings.append(f"spot termination-time: {spot.warning}")
        kind = NoticeKind.SPOT_TERMINATION
        reading.add(kind, None, spot.time, spot.text)  # the body is the time: no id in it
        return reading

    async def read_events(self) -> Reading:
        events = await self.fetch(EVENTS_PATH, parse_active_system_events)
        reading = self.reading()
        for ev in events or []:
            kind = maintenance_kind(ev.code)
            ended = (ev.status or "").lower() in ENDED
            problem = ev.time_problem or (None if ev.not_before_text else "no NotBefore time")
            reading.add(kind, ev.event_id, ev.not_before, ev.raw, withdrawn=ended, time_problem=problem)
        return reading

    async def identity(self) -> InstanceIdentityEvent:
        return await self.identity_from_paths(IDENTITY_PATHS)


declare(
    CloudSpec(
        AlibabaProvider,
        dmi=(DmiRule("sys_vendor", "Alibaba Cloud"), DmiRule("product_name", "Alibaba Cloud", "starts")),
        words=("Alibaba Cloud", "阿里云"),
        notice=NoticeWindow("Alibaba Cloud spot (~5 min)", 300.0),
        simulator="agent.devtools.simclouds:AlibabaSim",
        order=10,
    )
)
