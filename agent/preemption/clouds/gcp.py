"""Google Compute Engine: preemption and host maintenance, by long-poll.

Paths (base ``http://metadata.google.internal``, every request with ``Metadata-Flavor: Google``):

- ``/computeMetadata/v1/instance/preempted``: ``TRUE`` / ``FALSE``.
- ``/computeMetadata/v1/instance/maintenance-event``: ``NONE``, ``MIGRATE_ON_HOST_MAINTENANCE`` or
  ``TERMINATE_ON_HOST_MAINTENANCE``.

Each is watched with ``?wait_for_change=true&timeout_sec=N&last_etag=E``: the first plain read gives the
value and its ``ETag``, and each long-poll returns as soon as the value differs from that ETag (or
after N seconds with the same value). The server answers 503 during maintenance; the watcher retries.
GCE gives no deadline: preemption leaves about 30 s, a maintenance event about 60 s.
"""

from __future__ import annotations

import re

from agent.core.events import InstanceIdentityEvent
from agent.core.vocabulary import Cloud, Market, NoticeKind
from agent.preemption.dmi import DmiRule
from agent.preemption.provider import NoticeSource, Provider, Reading, first_line
from agent.preemption.registry import CloudSpec, NoticeWindow, declare
from agent.preemption.wire import BodyFormatError, MetadataError

PREFIX = "/computeMetadata/v1/"
PREEMPTED_PATH = PREFIX + "instance/preempted"
MAINTENANCE_PATH = PREFIX + "instance/maintenance-event"
HEADERS = {"Metadata-Flavor": "Google"}
MAINTENANCE_KINDS = {
    "MIGRATE_ON_HOST_MAINTENANCE": NoticeKind.MAINTENANCE_MIGRATE,
    "TERMINATE_ON_HOST_MAINTENANCE": NoticeKind.MAINTENANCE_TERMINATE,
}
_VALUE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def parse_preempted(body: str) -> bool:
    value = body.strip().upper()
    if value not in ("TRUE", "FALSE"):
        raise BodyFormatError(f"instance/preempted is not TRUE or FALSE: {body.strip()[:80]!r}")
    return value == "TRUE"


def parse_maintenance_event(body: str) -> str | None:
    """The pending maintenance event's name, or None for ``NONE``."""
    value = body.strip()
    if not _VALUE.match(value):
        raise BodyFormatError(f"instance/maintenance-event is not an event name: {value[:80]!r}")
    return None if value == "NONE" else value


PARSERS = {PREEMPTED_PATH: parse_preempted, MAINTENANCE_PATH: parse_maintenance_event}


def _last_segment(value: str | None) -> str | None:
    """``projects/123/zones/us-central1-a`` -> ``us-central1-a``."""
    return value.rsplit("/", 1)[-1] if value else None


class GcpProvider(Provider):
    name = Cloud.GCP
    base_url = "http://metadata.google.internal"
    kinds = (
        NoticeKind.SPOT_TERMINATION,
        NoticeKind.MAINTENANCE_MIGRATE,
        NoticeKind.MAINTENANCE_TERMINATE,
        NoticeKind.MAINTENANCE_OTHER,
    )
    headers = HEADERS

    def sources(self) -> list[NoticeSource]:
        long_poll = self.cfg.gcp_long_poll
        return [
            NoticeSource(
                "preempted",
                lambda: self._read(PREEMPTED_PATH, None),
                long_poll=(lambda etag: self._poll(PREEMPTED_PATH, etag)) if long_poll else None,
            ),
            NoticeSource(
                "maintenance",
                lambda: self._read(MAINTENANCE_PATH, None),
                long_poll=(lambda etag: self._poll(MAINTENANCE_PATH, etag)) if long_poll else None,
            ),
        ]

    def _to_reading(self, path: str, value: bool | str | None) -> Reading:
        """``value``: parse_preempted's or parse_maintenance_event's answer (None: nothing, or 404).
        GCE gives no event id and the same value comes back at every maintenance: the tracker knows
        the notice by its source and kind while the value stays."""
        reading = self.reading()
        if value is True:
            reading.add(NoticeKind.SPOT_TERMINATION, None, None, "TRUE")
        elif isinstance(value, str):
            reading.add(MAINTENANCE_KINDS.get(value, NoticeKind.MAINTENANCE_OTHER), None, None, value)
        return reading

    async def _read(self, path: str, _: None) -> Reading:
        return self._to_reading(path, await self.fetch(path, PARSERS[path]))

    async def _poll(self, path: str, etag: str | None) -> tuple[Reading, str | None]:
        """One long-poll round; without an ETag yet, a plain read that fetches one."""
        params = None
        timeout = None
        if etag is not None:
            wait = int(self.cfg.gcp_long_poll_timeout)
            params = {"wait_for_change": "true", "timeout_sec": str(wait), "last_etag": etag}
            timeout = wait + self.cfg.timeout
        resp = await self.client.request("GET", path, params=params, timeout=timeout, parse=PARSERS[path])
        value = None if resp.status == 404 else resp.parsed
        return self._to_reading(path, value), resp.headers.get("ETag") or None

    async def identity(self) -> InstanceIdentityEvent:
        zone = _last_segment(await self.fetch(PREFIX + "instance/zone", first_line))
        try:
            preemptible = await self.fetch(PREFIX + "instance/scheduling/preemptible", first_line)
        except MetadataError:  # optional: the identity stands without it
            preemptible = None
        return InstanceIdentityEvent(
            provider=self.name,
            instance_id=await self.fetch(PREFIX + "instance/id", first_line),
            instance_type=_last_segment(await self.fetch(PREFIX + "instance/machine-type", first_line)),
            region=zone.rsplit("-", 1)[0] if zone and "-" in zone else None,
            zone=zone,
            market=_market(preemptible),
        )


def _market(preemptible: str | None) -> str | None:
    """``instance/scheduling/preemptible``: TRUE on Spot and preemptible VMs."""
    if preemptible is None:
        return None
    return Market.SPOT if preemptible.strip().upper() == "TRUE" else Market.ON_DEMAND


declare(
    CloudSpec(
        GcpProvider,
        dmi=(DmiRule("sys_vendor", "Google"), DmiRule("product_name", "Google Compute Engine")),
        words=("Google Cloud", "谷歌云"),
        notice=NoticeWindow("GCP preemption (30 s)", 30.0),
        simulator="agent.devtools.simclouds:GcpSim",
        order=30,
    )
)
