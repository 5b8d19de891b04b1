"""What each declaration's readers must find in it: a cloud (agent/preemption/clouds/<cloud>.py),
a chat channel (agent/alerts/services/<service>.py) and a scheduler backend
(agent/scheduler/backends/<kind>.py). Each check names the reader that lacks
the piece, so a new cloud or channel that passes here is seen everywhere it should be."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import aiohttp

from agent.alerts import i18n
from agent.alerts.connect import build_channel
from agent.alerts.kinds import facts, render
from agent.alerts.scene import Scene
from agent.alerts.services import channel_class
from agent.alerts.services.base import Channel, Outcome, post
from agent.checkpoint.episodelog import Episode
from agent.checkpoint.report import build_report
from agent.cli.preemption import add_args
from agent.config import ConfigError, parse_config
from agent.config.alerts import parse_rate
from agent.core.vocabulary import ChannelType, EpisodeState, Language, NoticeKind, Style
from agent.core.zones import zone
from agent.devtools import alert_examples
from agent.devtools.simclouds import simulator_class
from agent.devtools.simstate import SimState
from agent.preemption import registry
from agent.preemption.detect import classify
from agent.preemption.dmi import Dmi
from agent.preemption.provider import Provider
from agent.preemption.registry import CloudSpec
from agent.scheduler import backend
from agent.scheduler.backend import SchedulerBackend

ALERTS_TESTS = str(Path(__file__).parent / "alerts")  # where fake_chat.py lives
if ALERTS_TESTS not in sys.path:
    sys.path.append(ALERTS_TESTS)


def _episode(name: str) -> Episode:
    ep = Episode(
        "e1",
        name,
        NoticeKind.SPOT_TERMINATION,
        1300.0,
        1000.0,
        1000.0,
        requested_at=1000.0,
        phase=EpisodeState.COMPLETED,
    )
    ep.ack = {"via": "file", "at": 1001.0, "step": 1, "path": "/mnt/x"}
    return ep


def cloud_gaps(spec: CloudSpec) -> list[str]:
    """Every reader of the cloud's declaration that does not see it, in words; [] when all do."""
    name, gaps = spec.name, []
    if registry.provider_class(name) is not spec.provider:
        gaps.append(f"watcher: registry.provider_class({name!r}) is not {spec.provider.__name__}")
    cls = spec.provider
    if not cls.base_url.startswith(("http://", "https://")):
        gaps.append(f"provider: base_url {cls.base_url!r} is not an http URL")
    if not cls.kinds or any(k not in NoticeKind for k in cls.kinds):
        gaps.append(f"provider: kinds {cls.kinds!r} are not NoticeKind members")
    for method in ("sources", "identity"):
        if getattr(cls, method) is getattr(Provider, method):
            gaps.append(f"provider: {cls.__name__}.{method}() is not implemented")
    for rule in spec.dmi:
        found = classify(Dmi(**{rule.field: rule.value})).provider
        if found != name:
            gaps.append(f"detect: DMI {rule.field}={rule.value!r} is read as {found!r}")
    try:
        section = parse_config(
            {"preemption": {"provider": name, "endpoints": {name: "http://127.0.0.1:9"}}}
        ).preemption
        if section.provider != name or section.endpoint_for(name) != "http://127.0.0.1:9":
            gaps.append("config: [preemption] provider or [preemption.endpoints] lost it")
    except ConfigError as e:
        gaps.append(f"config: {'; '.join(e.problems)}")
    try:
        face = simulator_class(name)
        SimState(name)
        if not set(face.notice_kinds) <= set(cls.kinds):
            gaps.append(f"simulator: serves {face.notice_kinds} beyond the provider's {cls.kinds}")
    except (ValueError, TypeError, ImportError) as e:
        gaps.append(f"simulator: {e}")
    parser = argparse.ArgumentParser()
    add_args(parser)
    try:
        parser.parse_args(["--provider", name])
    except SystemExit:
        gaps.append("metadata-sim: --provider does not take it")
    for lang, word in zip(Language, spec.words, strict=True):
        if not word or i18n.cloud(name, lang) != word:
            gaps.append(f"alerts: its {lang} name is {i18n.cloud(name, lang)!r}, not {word!r}")
    missing_words = [k for k in cls.kinds if k not in i18n.NOTICE_KINDS]
    if missing_words:
        gaps.append(f"alerts: no words for notice kinds {missing_words}")
    report = build_report(_episode(name), 1.0, name)
    rows = [c for c in report["clouds"] if c["cloud"] == name]
    if not rows or rows[0]["notice_seconds"] != spec.notice.seconds:
        gaps.append(f"drill report: no row for {name} with its {spec.notice.seconds:g} s notice")
    elif spec.notice.label not in report["verdict_line"]:
        gaps.append(f"drill report: the verdict does not judge against {spec.notice.label}")
    return gaps


def scheduler_gaps(cls: type[SchedulerBackend]) -> list[str]:
    """Every reader of the backend's declaration that does not see it; [] when all do."""
    kind, gaps = cls.kind, []
    if backend.backend_class(kind) is not cls:
        gaps.append(f"component: backend.backend_class({kind!r}) is not {cls.__name__}")
    try:
        if parse_config({"scheduler": {"kind": kind}}).scheduler.kind != kind:
            gaps.append("config: [scheduler] kind lost it")
    except ConfigError as e:
        gaps.append(f"config: {'; '.join(e.problems)}")
    for lang, word in zip(Language, cls.words, strict=True):
        if not word or i18n.scheduler(cls.words, lang) != word:
            gaps.append(f"alerts: its {lang} name is {i18n.scheduler(cls.words, lang)!r}, not {word!r}")
    return gaps


def _webhook(cls: type[Channel], url: str, **keys: object) -> dict[str, object]:
    table = {"name": "c", "type": cls.type, "url": url, "link": "https://grafana.example/d/node"}
    return {"alerts": {"webhooks": [{**table, **keys}]}}


def channel_gaps(cls: type[Channel]) -> list[str]:
    """Every reader of the channel's declaration that does not see it; [] when all do. Each of its
    styles goes through the fake service of tests/alerts/fake_chat.py, which must accept it."""
    kind, gaps = cls.type, []
    try:
        if channel_class(kind) is not cls:
            gaps.append(f"services: channel_class({kind!r}) is not {cls.__name__}")
    except ValueError as e:
        gaps.append(f"services: {e}")
    if kind not in ChannelType:
        gaps.append(f"vocabulary: ChannelType has no {kind!r}")
    if not cls.styles or any(s not in Style for s in cls.styles):
        gaps.append(f"styles: {cls.styles!r} are not Style members")
    try:
        rates = tuple(parse_rate(r) for r in cls.rates)
        hook = parse_config(_webhook(cls, cls.example_url)).alerts.webhooks[0]
        if hook.effective_style != cls.styles[0] or hook.rates != rates:
            gaps.append("config: the default style or rates are not the declared ones")
        for style in cls.styles:
            parse_config(_webhook(cls, cls.example_url, style=style))
    except (ValueError, ConfigError) as e:
        gaps.append(f"config: {e}")
    try:
        lines = alert_examples.request_for(kind, alert_examples.events()[0][1], Language.EN)
        if cls.example_url not in "\n".join(lines):
            gaps.append("alert examples: the example request does not go to example_url")
    except Exception as e:  # any failure here is the gap to name
        gaps.append(f"alert examples: {type(e).__name__}: {e}")
    gaps += asyncio.run(_fake_gaps(cls))
    return gaps


async def _fake_gaps(cls: type[Channel]) -> list[str]:
    from fake_chat import SERVES, FakeChat

    if cls.type not in SERVES:
        return [f"tests/alerts/fake_chat.py: no fake service serves {cls.type!r} (SERVES)"]
    gaps = []
    event = alert_examples.events()[0][1]
    f = facts(event)
    assert f is not None
    scene = Scene(alert_examples.NODE, alert_examples.GPUS, zone("UTC"), alert_examples.NOW)
    with FakeChat() as fake:
        bot = fake.add(SERVES[cls.type])
        async with aiohttp.ClientSession() as session:
            for style in cls.styles:
                hook = parse_config(_webhook(cls, bot.url, style=style)).alerts.webhooks[0]
                channel = build_channel(hook)
                for lang in Language:
                    req = channel.build(render(event, f, scene, lang))
                    reply = await post(session, req, 5.0)
                    outcome = reply if isinstance(reply, Outcome) else channel.judge(reply)
                    if not outcome.ok:
                        gaps.append(f"fake {SERVES[cls.type]}: {style} in {lang}: {outcome.describe()}")
    return gaps
