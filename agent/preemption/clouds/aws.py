"""AWS EC2 (IMDSv2): spot instance action, rebalance recommendation, scheduled maintenance events.

Paths (base ``http://169.254.169.254``), every read with ``X-aws-ec2-metadata-token`` from
``PUT /latest/api/token`` (``X-aws-ec2-metadata-token-ttl-seconds``):

- ``/latest/meta-data/spot/instance-action``: 404, or ``{"action": "terminate|stop|hibernate",
  "time": "<RFC 3339>"}``.
- ``/latest/meta-data/events/recommendations/rebalance``: 404, or ``{"noticeTime": "<RFC 3339>"}``.
  An early warning with no deadline of its own (``noticeTime`` is when it was issued).
- ``/latest/meta-data/events/maintenance/scheduled``: a JSON list of ``{"Code", "Description",
  "EventId", "NotBefore", "NotAfter", "State"}`` with times like ``21 Jan 2019 09:00:43 GMT``; a
  ``canceled`` or ``completed`` event withdraws the notice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from agent.core.events import InstanceIdentityEvent
from agent.core.vocabulary import Cadence, Cloud, Market, NoticeKind
from agent.preemption.dmi import DmiRule
from agent.preemption.provider import (
    NoticeSource,
    Provider,
    Reading,
    TimeFormatError,
    first_line,
    first_time,
    parse_iso_time,
    parse_json,
    parse_json_object,
    parse_rfc1123,
)
from agent.preemption.registry import CloudSpec, NoticeWindow, declare
from agent.preemption.wire import BodyFormatError, MetadataError, TokenScheme

ACTION_PATH = "/latest/meta-data/spot/instance-action"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
SCHEDULED_PATH = "/latest/meta-data/events/maintenance/scheduled"
IDENTITY_PATH = "/latest/dynamic/instance-identity/document"
LIFECYCLE_PATH = "/latest/meta-data/instance-life-cycle"  # spot | on-demand | scheduled
TOKEN = TokenScheme("/latest/api/token", "X-aws-ec2-metadata-token-ttl-seconds", "X-aws-ec2-metadata-token")

ACTION_KINDS = {
    "terminate": NoticeKind.SPOT_TERMINATION,
    "stop": NoticeKind.SPOT_STOP,
    "hibernate": NoticeKind.SPOT_HIBERNATE,
}
CODE_KINDS = {
    "instance-reboot": NoticeKind.MAINTENANCE_REBOOT,
    "system-reboot": NoticeKind.MAINTENANCE_REBOOT,
    "system-maintenance": NoticeKind.MAINTENANCE_OTHER,
    "instance-retirement": NoticeKind.MAINTENANCE_RETIREMENT,
    "instance-stop": NoticeKind.MAINTENANCE_STOP,
}


def parse_aws_time(text: str) -> datetime:
    """``21 Jan 2019 09:00:43 GMT`` (Go's ``2 Jan 2006 15:04:05 GMT``): RFC 1123 without the day name."""
    return parse_rfc1123(text, weekday=False)


@dataclass(frozen=True, slots=True)
class InstanceAction:
    action: str
    time: datetime | None
    time_problem: str | None
    raw: str


def parse_instance_action(body: str) -> InstanceAction:
    doc = parse_json(body.strip(), "spot/instance-action")
    if not isinstance(doc, dict) or not isinstance(doc.get("action"), str):
        raise BodyFormatError(f"spot/instance-action has no action: {body.strip()[:80]!r}")
    when, problem = None, None
    try:
        when = parse_iso_time(str(doc.get("time", "")))
    except TimeFormatError as e:
        problem = str(e)
    return InstanceAction(doc["action"].strip().lower(), when, problem, body.strip())


@dataclass(frozen=True, slots=True)
class Rebalance:
    notice_time: str  # when the recommendation was issued: neither a deadline nor an identity
    raw: str


def parse_rebalance(body: str) -> Rebalance:
    doc = parse_json(body.strip(), "rebalance recommendation")
    if not isinstance(doc, dict) or "noticeTime" not in doc:
        raise BodyFormatError(f"rebalance recommendation has no noticeTime: {body.strip()[:80]!r}")
    return Rebalance(str(doc["noticeTime"]), body.strip())


@dataclass(frozen=True, slots=True)
class MaintenanceEvent:
    code: str
    event_id: str | None  # AWS always gives one; None: the tracker knows it by its kind
    state: str
    description: str
    not_before: datetime | None
    time_problem: str | None
    raw: str


def parse_scheduled_events(body: str) -> list[MaintenanceEvent]:
    text = body.strip()
    if not text:
        return []
    doc = parse_json(text, "events/maintenance/scheduled")
    if isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list):
        raise BodyFormatError(f"events/maintenance/scheduled is a JSON {type(doc).__name__}, not a list")
    out = []
    for item in doc:
        if not isinstance(item, dict):
            continue
        code = str(item.get("Code") or "unknown")
        description = str(item.get("Description") or "")
        state = str(item.get("State") or "").lower()
        if not state and description.startswith(("[Completed]", "[Canceled]")):
            state = description[1:].split("]", 1)[0].lower()
        not_before, problem = first_time(str(item.get("NotBefore") or ""), parse_aws_time, parse_iso_time)
        raw = json.dumps(item, sort_keys=True)
        event_id = str(item["EventId"]) if item.get("EventId") else None
        out.append(MaintenanceEvent(code, event_id, state or "active", description, not_before, problem, raw))
    return out


def parse_identity_document(body: str) -> dict[str, Any]:
    return parse_json_object(body, "instance-identity document")


class AwsProvider(Provider):
    name = Cloud.AWS
    base_url = "http://169.254.169.254"
    kinds = (
        NoticeKind.SPOT_TERMINATION,
        NoticeKind.SPOT_STOP,
        NoticeKind.SPOT_HIBERNATE,
        NoticeKind.REBALANCE_RECOMMENDATION,
        NoticeKind.MAINTENANCE_REBOOT,
        NoticeKind.MAINTENANCE_STOP,
        NoticeKind.MAINTENANCE_RETIREMENT,
        NoticeKind.MAINTENANCE_OTHER,
    )
    token = TOKEN

    def sources(self) -> list[NoticeSource]:
        return [
            NoticeSource("spot", self.read_action),
            NoticeSource("rebalance", self.read_rebalance),
            NoticeSource("maintenance", self.read_scheduled, cadence=Cadence.SLOW),
        ]

    async def read_action(self) -> Reading:
        act = await self.fetch(ACTION_PATH, parse_instance_action)
        reading = self.reading()
        if act is None:
            return reading
        kind = ACTION_KINDS.get(act.action, NoticeKind.SPOT_TERMINATION)
        if act.action not in ACTION_KINDS:
            reading.warnings.append(f"unknown spot action {act.action!r}; treated as termination")
        # no id from AWS, and "time" may move between reads: the tracker knows it by its kind
        reading.add(kind, None, act.time, act.raw, time_problem=act.time_problem)
        return reading

    async def read_rebalance(self) -> Reading:
        rebalance = await self.fetch(REBALANCE_PATH, parse_rebalance)
        reading = self.reading()
        if rebalance is not None:
            kind = NoticeKind.REBALANCE_RECOMMENDATION
            # noticeTime is not an id either: mocks (and a restarted service) serve a new one per read
            reading.add(kind, None, None, rebalance.raw)
        return reading

    async def read_scheduled(self) -> Reading:
        events = await self.fetch(SCHEDULED_PATH, parse_scheduled_events)
        reading = self.reading()
        for ev in events or []:
            ended = ev.state in ("completed", "canceled", "cancelled")
            kind = CODE_KINDS.get(ev.code, NoticeKind.MAINTENANCE_OTHER)
            reading.add(
                kind, ev.event_id, ev.not_before, ev.raw, withdrawn=ended, time_problem=ev.time_problem
            )
        return reading

    async def identity(self) -> InstanceIdentityEvent:
        doc = await self.fetch(IDENTITY_PATH, parse_identity_document) or {}
        ident = self.identity_from_document(
            doc,
            instance_id="instanceId",
            instance_type="instanceType",
            region="region",
            zone="availabilityZone",
        )
        try:
            lifecycle = await self.fetch(LIFECYCLE_PATH, first_line)
        except MetadataError:  # optional: the identity stands without it
            lifecycle = None
        if lifecycle in ("spot", "on-demand", "scheduled"):  # instance-life-cycle's own words
            ident = replace(ident, market=Market.SPOT if lifecycle == "spot" else Market.ON_DEMAND)
        return ident


declare(
    CloudSpec(
        AwsProvider,
        dmi=(DmiRule("sys_vendor", "Amazon EC2"), DmiRule("bios_version", "amazon", "holds")),
        words=("AWS", "亚马逊云科技"),
        notice=NoticeWindow("AWS spot (2 min)", 120.0),
        simulator="agent.devtools.simclouds:AwsSim",
        order=20,
    )
)
