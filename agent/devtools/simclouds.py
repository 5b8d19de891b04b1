"""What the metadata simulator serves for each cloud: the real paths, required headers, status codes
and body formats, rendered from the simulator's state (:mod:`agent.devtools.simulator`).

Which face serves which cloud is the cloud's declaration (``simulator`` in
agent/preemption/clouds/<cloud>.py). The paths and header names come from the provider modules
themselves, so the simulator and the watcher cannot drift apart on a spelling; the body formats are
written out here independently, the way each cloud documents them.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from aiohttp import web

from agent.core.vocabulary import Cloud, NoticeKind
from agent.devtools.simwords import ENDED_SIM_STATES, SimEventState
from agent.preemption import registry
from agent.preemption.clouds import alibaba, aws, azure, gcp, tencent
from agent.preemption.wire import TokenScheme

if TYPE_CHECKING:
    from agent.devtools.simstate import SimState


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def aws_time(t: datetime) -> str:
    t = t.astimezone(UTC)
    return f"{t.day} {t.strftime('%b %Y %H:%M:%S')} GMT"


def rfc1123(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")


def text(body: str, status: int = 200, **headers: str) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/plain", headers=headers or None)


def not_found() -> web.Response:
    # what the ECS/EC2 metadata servers send for a path with nothing under it
    return web.Response(
        text='<?xml version="1.0" encoding="iso-8859-1"?>\n<html><head><title>404 - Not Found</title>'
        "</head><body><h1>404 - Not Found</h1></body></html>\n",
        status=404,
        content_type="text/html",
    )


def as_json(doc: Any, status: int = 200, **headers: str) -> web.Response:
    return web.Response(
        text=json.dumps(doc, indent=2),
        status=status,
        content_type="application/json",
        headers=headers or None,
    )


# how AWS marks an ended scheduled event in its description
_AWS_PREFIX: dict[str, str] = {SimEventState.CANCELED: "[Canceled] ", SimEventState.COMPLETED: "[Completed] "}


class CloudSim:
    """One cloud's face. ``serve`` answers a metadata request (headers and tokens already checked)."""

    name: ClassVar[str]
    token: ClassVar[TokenScheme | None] = None
    missing_token_status: ClassVar[int] = 401
    notice_kinds: ClassVar[tuple[str, ...]] = (NoticeKind.SPOT_TERMINATION,)
    maintenance_kinds: ClassVar[dict[str, str]] = {}  # our word -> the cloud's code
    identity: ClassVar[dict[str, str]] = {}

    def __init__(self, state: SimState) -> None:
        self.state = state

    def check_headers(self, request: web.Request) -> web.Response | None:
        return None

    async def serve(self, request: web.Request) -> web.Response:
        raise NotImplementedError

    def event_id(self, seq: int) -> str:
        return f"sim-{seq}"


class AlibabaSim(CloudSim):
    name = Cloud.ALIBABA
    token = alibaba.TOKEN
    missing_token_status = 403  # hardened mode refuses tokenless reads
    maintenance_kinds = {
        "reboot": "SystemMaintenance.Reboot",
        "redeploy": "SystemMaintenance.Redeploy",
        "stop": "SystemMaintenance.Stop",
    }
    identity = {
        alibaba.IDENTITY_PATHS["instance_id"]: "i-sim0a1b2c3d4e5f6a7b",
        alibaba.IDENTITY_PATHS["instance_type"]: "ecs.gn7i-c8g1.2xlarge",
        alibaba.IDENTITY_PATHS["region"]: "cn-hangzhou",
        alibaba.IDENTITY_PATHS["zone"]: "cn-hangzhou-i",
    }

    def event_id(self, seq: int) -> str:
        return f"e-sim{seq:08d}"

    async def serve(self, request: web.Request) -> web.Response:
        path = request.path
        if path == alibaba.SPOT_PATH:
            n = self.state.active_notice((NoticeKind.SPOT_TERMINATION,))
            return text(n.time_text or rfc3339(n.deadline)) if n else not_found()
        if path == alibaba.EVENTS_PATH:
            events = [
                {
                    "EventId": m.id,
                    "EventType": {"Code": 1, "Name": m.code or self.maintenance_kinds[m.kind]},
                    "EventCycleStatus": {"Code": 24, "Name": "Executing" if m.started else "Scheduled"},
                    "NotBefore": m.time_text or rfc3339(m.deadline),
                    "EventPublishTime": rfc3339(m.announced_at or m.deadline),
                }
                for m in self.state.active_maintenance()
            ]
            return as_json(events) if events else not_found()
        if path in self.identity:
            return text(self.identity[path])
        return not_found()


class AwsSim(CloudSim):
    name = Cloud.AWS
    token = aws.TOKEN
    notice_kinds = (
        NoticeKind.SPOT_TERMINATION,
        NoticeKind.SPOT_STOP,
        NoticeKind.SPOT_HIBERNATE,
        NoticeKind.REBALANCE_RECOMMENDATION,
    )
    maintenance_kinds = {
        "reboot": "system-reboot",
        "instance-reboot": "instance-reboot",
        "stop": "instance-stop",
        "retirement": "instance-retirement",
        "other": "system-maintenance",
    }
    document: ClassVar[dict[str, str]] = {
        "instanceId": "i-0sim1234567890abc",
        "instanceType": "p4d.24xlarge",
        "region": "us-east-1",
        "availabilityZone": "us-east-1a",
        "accountId": "123456789012",
        "imageId": "ami-0sim0000000000000",
    }
    ACTIONS: ClassVar[dict[str, str]] = {
        NoticeKind.SPOT_TERMINATION: "terminate",
        NoticeKind.SPOT_STOP: "stop",
        NoticeKind.SPOT_HIBERNATE: "hibernate",
    }

    def event_id(self, seq: int) -> str:
        return f"instance-event-{hashlib.sha1(str(seq).encode()).hexdigest()[:17]}"

    async def serve(self, request: web.Request) -> web.Response:
        path = request.path
        if path == aws.ACTION_PATH:
            n = self.state.active_notice(tuple(self.ACTIONS))
            if n is None:
                return not_found()
            return as_json({"action": self.ACTIONS[n.kind], "time": n.time_text or rfc3339(n.deadline)})
        if path == aws.REBALANCE_PATH:
            n = self.state.active_notice((NoticeKind.REBALANCE_RECOMMENDATION,))
            if n is None:
                return not_found()
            return as_json({"noticeTime": n.time_text or rfc3339(n.issued_at)})
        if path == aws.SCHEDULED_PATH:
            events = []
            for m in self.state.maintenance_listed():
                state = m.state if m.state in ENDED_SIM_STATES else SimEventState.ACTIVE
                prefix = _AWS_PREFIX.get(state, "")
                not_before = m.time_text or aws_time(m.deadline)
                events.append(
                    {
                        "NotBefore": not_before,
                        "Code": m.code or self.maintenance_kinds[m.kind],
                        "Description": f"{prefix}scheduled {m.kind}",
                        "EventId": m.id,
                        "NotAfter": aws_time(m.deadline + timedelta(hours=2)),
                        "State": state,
                    }
                )
            return as_json(events)
        if path == aws.IDENTITY_PATH:
            return as_json(self.document)
        simple = {
            "/latest/meta-data/instance-id": self.document["instanceId"],
            "/latest/meta-data/instance-type": self.document["instanceType"],
            "/latest/meta-data/placement/availability-zone": self.document["availabilityZone"],
            aws.LIFECYCLE_PATH: "spot",  # the simulator is a spot instance: it sends spot notices
        }
        return text(simple[path]) if path in simple else not_found()


class GcpSim(CloudSim):
    name = Cloud.GCP
    maintenance_kinds = {
        "migrate": "MIGRATE_ON_HOST_MAINTENANCE",
        "terminate": "TERMINATE_ON_HOST_MAINTENANCE",
    }
    identity = {
        gcp.PREFIX + "instance/id": "4520031799277581759",
        gcp.PREFIX + "instance/machine-type": "projects/123456789012/machineTypes/a2-highgpu-8g",
        gcp.PREFIX + "instance/zone": "projects/123456789012/zones/us-central1-a",
        gcp.PREFIX + "instance/name": "sim-gpu-node-0",
        gcp.PREFIX + "instance/scheduling/preemptible": "TRUE",
    }
    HEADERS: ClassVar[dict[str, str]] = {"Metadata-Flavor": "Google", "Server": "Metadata Server for VM"}

    def check_headers(self, request: web.Request) -> web.Response | None:
        if request.headers.get("Metadata-Flavor") != "Google" or "X-Forwarded-For" in request.headers:
            return web.Response(
                text="Your client does not have permission to get URL from this server. "
                "Missing Metadata-Flavor:Google header.\n",
                status=403,
                content_type="text/html",
                headers=self.HEADERS,
            )
        return None

    def value(self, path: str) -> str | None:
        if path == gcp.PREEMPTED_PATH:
            return "TRUE" if self.state.active_notice((NoticeKind.SPOT_TERMINATION,)) else "FALSE"
        if path == gcp.MAINTENANCE_PATH:
            active = self.state.active_maintenance()
            return (active[-1].code or self.maintenance_kinds[active[-1].kind]) if active else "NONE"
        return self.identity.get(path)

    @staticmethod
    def etag(value: str) -> str:
        return hashlib.sha1(value.encode()).hexdigest()[:16]

    async def serve(self, request: web.Request) -> web.Response:
        path = request.path
        value = self.value(path)
        if value is None:
            return web.Response(status=404, text="Not Found\n", headers=self.HEADERS)
        if request.query.get("wait_for_change", "").lower() == "true":
            try:
                wait = float(request.query.get("timeout_sec", "300"))
            except ValueError:
                return text("Invalid timeout_sec\n", 400, **self.HEADERS)
            last = request.query.get("last_etag") or self.etag(value)
            value = await self.state.wait_change(lambda: self.value(path) or "", self.etag, last, wait)
        return web.Response(
            text=value,
            content_type="application/text",
            headers={**self.HEADERS, "ETag": self.etag(value)},
        )


class AzureSim(CloudSim):
    name = Cloud.AZURE
    notice_kinds = (NoticeKind.SPOT_TERMINATION, NoticeKind.TERMINATION)
    maintenance_kinds = {
        "reboot": "Reboot",
        "redeploy": "Redeploy",
        "freeze": "Freeze",
        "terminate": "Terminate",
    }
    NOTICE_TYPES: ClassVar[dict[str, str]] = {
        NoticeKind.SPOT_TERMINATION: "Preempt",
        NoticeKind.TERMINATION: "Terminate",
    }
    DURATIONS: ClassVar[dict[str, int]] = {"Freeze": 9, "Reboot": 300, "Redeploy": 900}
    compute: ClassVar[dict[str, str]] = {
        "vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6",
        "name": "sim-gpu-node-0",
        "vmSize": "Standard_ND96asr_v4",
        "location": "eastus",
        "zone": "1",
        "osType": "Linux",
    }

    def event_id(self, seq: int) -> str:
        digest = hashlib.sha1(f"azure-{seq}".encode()).hexdigest().upper()
        return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def check_headers(self, request: web.Request) -> web.Response | None:
        if request.headers.get("Metadata", "").lower() != "true" or "X-Forwarded-For" in request.headers:
            return as_json({"error": "Bad request. Required metadata header not specified"}, 400)
        if not request.query.get("api-version"):
            return as_json(
                {"error": "Bad request. api-version was not specified in the request", "newest-versions": []},
                400,
            )
        return None

    def _events(self) -> list[dict[str, Any]]:
        out = []
        for ev in [*self.state.active_notices(self.notice_kinds), *self.state.active_maintenance()]:
            etype = self.NOTICE_TYPES.get(ev.kind) or ev.code or self.maintenance_kinds[ev.kind]
            out.append(
                {
                    "EventId": ev.id,
                    "EventType": etype,
                    "ResourceType": "VirtualMachine",
                    "Resources": list(ev.resources or [self.compute["name"]]),
                    "EventStatus": "Started" if ev.started else "Scheduled",
                    "NotBefore": "" if ev.started else ev.time_text or rfc1123(ev.deadline),
                    "Description": f"simulated {etype}",
                    "EventSource": "Platform",
                    "DurationInSeconds": self.DURATIONS.get(etype, -1),
                }
            )
        return out

    async def serve(self, request: web.Request) -> web.Response:
        path = request.path
        if path == azure.EVENTS_PATH and request.method == "POST":
            try:
                body = await request.json()
                ids = [str(r["EventId"]) for r in body["StartRequests"]]
            except (ValueError, KeyError, TypeError):
                return as_json({"error": "Bad request. StartRequests expected"}, 400)
            unknown = self.state.start_events(ids)
            if unknown:
                return as_json({"error": f"Bad request. Unknown EventId {unknown[0]}"}, 400)
            return web.Response(status=200)
        if path == azure.EVENTS_PATH:
            return as_json({"DocumentIncarnation": self.state.version, "Events": self._events()})
        if path == azure.COMPUTE_PATH:
            return as_json(self.compute)
        return as_json({"error": "Not found"}, 404)


class TencentSim(CloudSim):
    name = Cloud.TENCENT
    identity = {
        tencent.IDENTITY_PATHS["instance_id"]: "ins-sim0a1b2c",
        tencent.IDENTITY_PATHS["instance_type"]: "GN10Xp.2XLARGE40",
        tencent.IDENTITY_PATHS["region"]: "ap-guangzhou",
        tencent.IDENTITY_PATHS["zone"]: "ap-guangzhou-3",
    }

    async def serve(self, request: web.Request) -> web.Response:
        path = request.path
        if path == tencent.SPOT_PATH:
            n = self.state.active_notice((NoticeKind.SPOT_TERMINATION,))
            if n is None:
                return not_found()
            local = n.deadline.astimezone(tencent.BEIJING).strftime("%Y-%m-%d %H:%M:%S")
            return text(n.time_text or local)
        if path in self.identity:
            return text(self.identity[path])
        return not_found()


def simulator_class(provider: str) -> type[CloudSim]:
    """The face a cloud's declaration names (``simulator`` in agent/preemption/clouds/<cloud>.py):
    the simulator reads the declaration, the daemon never imports this side."""
    spec = registry.find(provider)
    if spec is None:
        raise ValueError(f"unknown provider {provider!r}; one of {', '.join(registry.names())}")
    module, _, name = spec.simulator.partition(":")
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, CloudSim)) or cls.name != provider:
        raise TypeError(f"cloud {provider}: simulator {spec.simulator!r} is not a CloudSim named {provider}")
    return cls
