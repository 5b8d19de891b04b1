"""Tencent Cloud CVM: spot termination time.

``GET http://metadata.tencentyun.com/latest/meta-data/spot/termination-time`` answers 404 while nothing
is scheduled, else a body like ``2018-08-18 12:05:33``: Beijing time (UTC+8) with no zone marker.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from agent.core.events import InstanceIdentityEvent
from agent.core.vocabulary import Cloud, NoticeKind
from agent.preemption.dmi import DmiRule
from agent.preemption.provider import NoticeSource, Provider, Reading, TimeFormatError, parse_iso_time
from agent.preemption.registry import CloudSpec, NoticeWindow, declare
from agent.preemption.wire import BodyFormatError

SPOT_PATH = "/latest/meta-data/spot/termination-time"
BEIJING = timezone(timedelta(hours=8), "UTC+8")
IDENTITY_PATHS = {
    "instance_id": "/latest/meta-data/instance-id",
    "instance_type": "/latest/meta-data/instance/instance-type",
    "region": "/latest/meta-data/placement/region",
    "zone": "/latest/meta-data/placement/zone",
}


@dataclass(frozen=True, slots=True)
class TencentSpotTermination:
    time: datetime
    text: str


def parse_tencent_time(text: str) -> datetime:
    """``2018-08-18 12:05:33`` (UTC+8, no zone marker) -> aware UTC datetime. A time that does carry a
    zone (``...Z`` or ``+08:00``) is read with that zone."""
    return parse_iso_time(text, assume=BEIJING)


def parse_spot_termination(body: str) -> TencentSpotTermination:
    text = body.strip()
    if not text:
        raise BodyFormatError("empty termination-time body")
    try:
        return TencentSpotTermination(parse_tencent_time(text), text)
    except TimeFormatError:
        raise BodyFormatError(f"termination-time is not a time: {text[:80]!r}") from None


class TencentProvider(Provider):
    name = Cloud.TENCENT
    base_url = "http://metadata.tencentyun.com"
    kinds = (NoticeKind.SPOT_TERMINATION,)

    def sources(self) -> list[NoticeSource]:
        return [NoticeSource("spot", self.read_spot)]

    async def read_spot(self) -> Reading:
        spot = await self.fetch(SPOT_PATH, parse_spot_termination)
        reading = self.reading()
        if spot is not None:
            kind = NoticeKind.SPOT_TERMINATION
            reading.add(kind, None, spot.time, spot.text)  # the body is the time: no id in it
        return reading

    async def identity(self) -> InstanceIdentityEvent:
        return await self.identity_from_paths(IDENTITY_PATHS)


declare(
    CloudSpec(
        TencentProvider,
        dmi=(
            DmiRule("sys_vendor", "Tencent Cloud", "starts"),
            DmiRule("product_name", "Tencent Cloud", "starts"),
        ),
        words=("Tencent Cloud", "腾讯云"),
        notice=NoticeWindow("Tencent Cloud spot (2 min)", 120.0),  # termination-time is set 2 min ahead
        simulator="agent.devtools.simclouds:TencentSim",
        order=50,
    )
)
