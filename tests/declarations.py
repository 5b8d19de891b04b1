"""What each declaration's readers must find in it: a cloud (agent/preemption/clouds/<cloud>.py)
and a chat channel (agent/alerts/services/<service>.py). Each check names the reader that lacks
the piece, so a new cloud or channel that passes here is seen everywhere it should be."""

from __future__ import annotations

import argparse

from agent.alerts import i18n
from agent.checkpoint.ledger import Episode
from agent.checkpoint.report import build_report
from agent.cli.preemption import add_args
from agent.config import ConfigError, parse_config
from agent.core.vocabulary import EpisodeState, Language, NoticeKind
from agent.devtools.simclouds import simulator_class
from agent.devtools.simstate import SimState
from agent.preemption import registry
from agent.preemption.detect import Dmi, classify
from agent.preemption.provider import Provider
from agent.preemption.registry import CloudSpec


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
