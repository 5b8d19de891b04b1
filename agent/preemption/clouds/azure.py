"""Azure Scheduled Events: Preempt, Terminate, Reboot, Redeploy and Freeze for this VM.

``GET http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01`` with ``Metadata: true``
answers ``{"DocumentIncarnation": N, "Events": [{"EventId", "EventType", "ResourceType", "Resources",
"EventStatus", "NotBefore", "Description", "EventSource", "DurationInSeconds"}]}``. ``NotBefore`` is an
RFC 1123 time (``Mon, 19 Sep 2016 18:29:47 GMT``), empty once the event has started. The first call
enables the service for the VM, so the watcher makes it at start-up. Events for a whole availability
set reach every VM in it: an event whose ``Resources`` does not name this VM is not ours.

``POST`` of ``{"StartRequests": [{"EventId": ...}]}`` to the same URL approves an event early. That
speeds the eviction for every VM listed, so the watcher only does it when ``azure_ack = true``, after
the checkpoint helper reports the checkpoint completed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent.core.events import InstanceIdentityEvent
from agent.core.vocabulary import Cloud, NoticeKind
from agent.preemption.dmi import DmiRule
from agent.preemption.provider import (
    NoticeSource,
    Provider,
    Reading,
    first_time,
    parse_iso_time,
    parse_json,
    parse_json_object,
    parse_rfc1123,
)
from agent.preemption.registry import CloudSpec, NoticeWindow, declare
from agent.preemption.wire import BodyFormatError

if TYPE_CHECKING:
    from agent.config.preemption import PreemptionSection

EVENTS_PATH = "/metadata/scheduledevents"
COMPUTE_PATH = "/metadata/instance/compute"
COMPUTE_API_VERSION = "2021-02-01"
HEADERS = {"Metadata": "true"}
TYPE_KINDS = {
    "Preempt": NoticeKind.SPOT_TERMINATION,
    "Terminate": NoticeKind.TERMINATION,
    "Reboot": NoticeKind.MAINTENANCE_REBOOT,
    "Redeploy": NoticeKind.MAINTENANCE_REDEPLOY,
    "Freeze": NoticeKind.MAINTENANCE_FREEZE,
}


@dataclass(frozen=True, slots=True)
class ScheduledEvent:
    event_id: str
    event_type: str
    status: str
    resources: tuple[str, ...]
    not_before: datetime | None
    time_problem: str | None
    description: str
    source: str
    duration_seconds: int | None
    raw: str


@dataclass(frozen=True, slots=True)
class ScheduledEvents:
    incarnation: int | None
    events: tuple[ScheduledEvent, ...]


def _not_before(text: str) -> tuple[datetime | None, str | None]:
    if not text.strip():
        return None, None  # the event has started: no NotBefore any more
    return first_time(text, parse_rfc1123, parse_iso_time)


def parse_scheduled_events(body: str) -> ScheduledEvents:
    doc = parse_json(body, "scheduledevents")
    if not isinstance(doc, dict) or not isinstance(doc.get("Events", []), list):
        raise BodyFormatError(f"scheduledevents has no Events list: {body.strip()[:80]!r}")
    inc = doc.get("DocumentIncarnation")
    events = []
    for item in doc.get("Events", []):
        if not isinstance(item, dict) or not item.get("EventId"):
            continue
        not_before, problem = _not_before(str(item.get("NotBefore") or ""))
        resources = item.get("Resources") or []
        duration = item.get("DurationInSeconds")
        events.append(
            ScheduledEvent(
                event_id=str(item["EventId"]),
                event_type=str(item.get("EventType") or "unknown"),
                status=str(item.get("EventStatus") or "Scheduled"),
                resources=tuple(str(r) for r in resources) if isinstance(resources, list) else (),
                not_before=not_before,
                time_problem=problem,
                description=str(item.get("Description") or ""),
                source=str(item.get("EventSource") or ""),
                duration_seconds=duration if isinstance(duration, int) and duration >= 0 else None,
                raw=json.dumps(item, sort_keys=True),
            )
        )
    return ScheduledEvents(inc if isinstance(inc, int) else None, tuple(events))


def parse_compute(body: str) -> dict[str, Any]:
    return parse_json_object(body, "instance/compute")


class AzureProvider(Provider):
    name = Cloud.AZURE
    base_url = "http://169.254.169.254"
    kinds = (
        NoticeKind.SPOT_TERMINATION,
        NoticeKind.TERMINATION,
        NoticeKind.MAINTENANCE_REBOOT,
        NoticeKind.MAINTENANCE_REDEPLOY,
        NoticeKind.MAINTENANCE_FREEZE,
        NoticeKind.MAINTENANCE_OTHER,
    )
    headers = HEADERS
    can_acknowledge = True
    vm_name: str | None = None
    incarnation: int | None = None

    def sources(self) -> list[NoticeSource]:
        return [NoticeSource("scheduledevents", self.read_events)]

    @property
    def _params(self) -> dict[str, str]:
        return {"api-version": self.cfg.azure_api_version}

    async def read_events(self) -> Reading:
        doc = await self.fetch(EVENTS_PATH, parse_scheduled_events, params=self._params)
        reading = self.reading()
        if doc is None:
            return reading
        self.incarnation = doc.incarnation
        for ev in doc.events:
            if self.vm_name and ev.resources and self.vm_name not in ev.resources:
                continue  # another VM of the availability set / scale set
            ended = ev.status.lower() in ("completed", "canceled", "cancelled")
            kind = TYPE_KINDS.get(ev.event_type, NoticeKind.MAINTENANCE_OTHER)
            reading.add(
                kind, ev.event_id, ev.not_before, ev.raw, withdrawn=ended, time_problem=ev.time_problem
            )
        return reading

    @classmethod
    def acknowledges_after_checkpoint(cls, cfg: PreemptionSection) -> bool:
        return cfg.azure_ack

    async def acknowledge(self, event_id: str) -> None:
        """Approve ``event_id`` now (StartRequests). Raises MetadataError when the service refuses."""
        await self.client.request(
            "POST", EVENTS_PATH, params=self._params, json_body={"StartRequests": [{"EventId": event_id}]}
        )

    async def identity(self) -> InstanceIdentityEvent:
        params = {"api-version": COMPUTE_API_VERSION}
        doc = await self.fetch(COMPUTE_PATH, parse_compute, params=params) or {}
        self.vm_name = str(doc["name"]) if doc.get("name") else None
        return self.identity_from_document(
            doc, instance_id="vmId", instance_type="vmSize", region="location", zone="zone"
        )


AZURE_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77"

declare(
    CloudSpec(
        AzureProvider,
        # Hyper-V anywhere says "Microsoft Corporation"; only Azure sets this asset tag
        dmi=(DmiRule("chassis_asset_tag", AZURE_ASSET_TAG),),
        words=("Microsoft Azure", "微软 Azure"),
        notice=NoticeWindow("Azure spot eviction (30 s)", 30.0),
        simulator="agent.devtools.simclouds:AzureSim",
        order=40,
    )
)
