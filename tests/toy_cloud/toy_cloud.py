"""A toy cloud, whole in one file: its parser, its provider, its face in the metadata simulator and
its declaration. Importing this module (declaring it) is all it takes for detection, the config,
the watcher, the simulator, the alerts' words and the drill report to know it."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from aiohttp import web

from agent.core.events import InstanceIdentityEvent
from agent.core.vocabulary import NoticeKind
from agent.devtools.simclouds import CloudSim, not_found, rfc3339, text
from agent.preemption.dmi import DmiRule
from agent.preemption.provider import NoticeSource, Provider, Reading, parse_iso_time
from agent.preemption.registry import CloudSpec, NoticeWindow, declare
from agent.preemption.wire import BodyFormatError


class ToyCloud(StrEnum):  # a real cloud's name is a member of Cloud in agent/core/vocabulary.py
    TOY = "toy"


RECLAIM_PATH = "/toy/v1/reclaim-at"  # 404, or the RFC 3339 time the instance is taken back
IDENTITY_PATHS = {"instance_id": "/toy/v1/instance-id", "region": "/toy/v1/region"}


def parse_reclaim(body: str) -> datetime:
    try:
        return parse_iso_time(body)
    except ValueError:
        raise BodyFormatError(f"reclaim-at is not a time: {body[:80]!r}") from None


class ToyProvider(Provider):
    name = ToyCloud.TOY
    base_url = "http://toy-metadata.invalid"  # never reached: the tests point endpoints at the simulator
    kinds = (NoticeKind.SPOT_TERMINATION,)

    def sources(self) -> list[NoticeSource]:
        return [NoticeSource("spot", self.read_reclaim)]

    async def read_reclaim(self) -> Reading:
        when = await self.fetch(RECLAIM_PATH, parse_reclaim)
        reading = self.reading()
        if when is not None:
            reading.add(NoticeKind.SPOT_TERMINATION, None, when, rfc3339(when))
        return reading

    async def identity(self) -> InstanceIdentityEvent:
        return await self.identity_from_paths(IDENTITY_PATHS)


class ToySim(CloudSim):
    name = ToyCloud.TOY
    identity = {IDENTITY_PATHS["instance_id"]: "toy-0001", IDENTITY_PATHS["region"]: "toy-east-1"}

    async def serve(self, request: web.Request) -> web.Response:
        if request.path == RECLAIM_PATH:
            n = self.state.active_notice((NoticeKind.SPOT_TERMINATION,))
            return text(rfc3339(n.deadline)) if n else not_found()
        if request.path in self.identity:
            return text(self.identity[request.path])
        return not_found()


declare(
    CloudSpec(
        ToyProvider,
        dmi=(DmiRule("sys_vendor", "Toy Cloud"),),
        words=("Toy Cloud", "玩具云"),
        notice=NoticeWindow("Toy Cloud spot (90 s)", 90.0),
        simulator="toy_cloud:ToySim",
        order=900,
    )
)
