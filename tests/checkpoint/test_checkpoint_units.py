"""Pure parts of the checkpoint action: signal masks, the deadline policy, the drill verdict, the
[trainer] config and the ledger."""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import UTC, datetime, timedelta

import pytest

from agent.checkpoint.episodelog import Episode, EpisodeLog
from agent.checkpoint.policy import acts_on, plan
from agent.checkpoint.report import build_report, render_report
from agent.config import ConfigError, parse_config
from agent.config.trainer import TrainerSection, signal_number
from agent.core.events import PreemptionEvent
from agent.core.vocabulary import EpisodeState
from agent.sources.processes.sigmask import parse_signal_masks

NOW = datetime(2026, 1, 5, 18, 0, tzinfo=UTC)


def test_signal_masks_of_this_process():
    """Each disposition as this process sets it (not SIGINT's: a shell's background job inherits it
    ignored, and then Python installs no handler for it)."""

    def masks():
        with open(f"/proc/{os.getpid()}/status") as f:
            return parse_signal_masks(f.read())

    old = signal.signal(signal.SIGUSR2, lambda *a: None)
    try:
        caught = masks()
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        ignored = masks()
        signal.signal(signal.SIGUSR2, signal.SIG_DFL)
        default = masks()
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert caught.catches(signal.SIGUSR2) and not caught.ignores(signal.SIGUSR2)
    assert ignored.ignores(signal.SIGUSR2) and not ignored.catches(signal.SIGUSR2)
    assert not default.catches(signal.SIGUSR2) and not default.ignores(signal.SIGUSR2)
    assert not caught.catches(signal.SIGKILL)


def test_signal_masks_text():
    text = "Name:\tpython\nSigBlk:\t0000000000000000\nSigIgn:\t0000000001001000\nSigCgt:\t0000000000000200\n"
    m = parse_signal_masks(text)
    assert m.catches(10) and not m.catches(12)  # bit 9 = SIGUSR1
    assert m.ignores(13) and m.ignores(25)  # SIGPIPE, SIGXFSZ
    for bad in ("Name:\tx\n", "SigCgt:\tzz\n", ""):
        with pytest.raises(ValueError, match="SigCgt"):
            parse_signal_masks(bad)


def _event(kind: str, seconds: float | None, drill: bool = False) -> PreemptionEvent:
    return PreemptionEvent(
        provider="alibaba",
        kind=kind,
        event_id="e1",
        deadline=None if seconds is None else NOW + timedelta(seconds=seconds),
        received_at=NOW,
        drill=drill,
    )


def test_policy_spot_acts_at_once_maintenance_at_deadline_minus_budget():
    spot = plan(_event("spot-termination", 300), NOW, 600, 0, 30)
    assert spot.act_at == NOW and spot.deadline == NOW + timedelta(seconds=300) and spot.escalate_at is None

    far = plan(_event("maintenance-reboot", 86400), NOW, 600, 20, 30)
    assert far.act_at == NOW + timedelta(seconds=86400 - 600)
    assert far.escalate_at == NOW + timedelta(seconds=86400 - 20)

    near = plan(_event("maintenance-reboot", 120), NOW, 600, 0, 30)
    assert near.act_at == NOW  # less time left than the budget: now

    drill = plan(_event("maintenance-reboot", 86400, drill=True), NOW, 600, 0, 30)
    assert drill.act_at == NOW

    gcp = plan(_event("preempt", None), NOW, 600, 0, 30)
    assert gcp.act_at == NOW and gcp.deadline == NOW + timedelta(seconds=30)

    # escalation never comes before the request itself
    short = plan(_event("spot-termination", 10), NOW, 600, 60, 30)
    assert short.escalate_at == NOW


def test_act_on_patterns():
    pats = TrainerSection().act_on
    for kind in ("spot-termination", "spot-stop", "preempt", "maintenance-reboot", "maintenance-redeploy"):
        assert acts_on(kind, pats), kind
    for kind in ("rebalance-recommendation", "maintenance-migrate", "maintenance-freeze"):
        assert not acts_on(kind, pats), kind


def _episode(duration: float | None, phase: str = EpisodeState.COMPLETED) -> Episode:
    ep = Episode(
        "e1", "alibaba", "spot-termination", 1300.0, 1000.0, 1000.0, requested_at=1000.0, phase=phase
    )
    if duration is not None:
        ep.ack = {"via": "file", "at": 1000.0 + duration, "step": 5, "path": "/mnt/nas/x"}
    return ep


def test_report_verdict_against_each_cloud():
    fast = build_report(_episode(4.0), 1.1, "alibaba")
    assert fast["verdict"] == "safe" and all(c["safe"] for c in fast["clouds"])
    assert fast["verdict_line"].startswith("SAFE on Alibaba Cloud spot")

    slow = _episode(45.0)
    own = build_report(slow, 1.1, "gcp")
    assert own["verdict"] == "would lose work" and "GCP" in own["verdict_line"]
    mixed = build_report(slow, 1.1, "none")
    assert mixed["verdict"] == "safe"  # provider unknown: say where it is safe and where not
    assert "WOULD LOSE WORK on GCP preemption (30 s), Azure spot eviction (30 s)" in mixed["verdict_line"]
    safe = {c["cloud"]: c["safe"] for c in mixed["clouds"]}
    assert safe == {"alibaba": True, "aws": True, "gcp": False, "azure": False, "tencent": True}

    tight = {c["cloud"]: c["tight"] for c in build_report(_episode(25.0), 1.1, "")["clouds"]}
    assert tight["gcp"] and not tight["alibaba"]

    missed = build_report(_episode(None, EpisodeState.MISSED), 1.1, "alibaba")
    assert missed["verdict"] == "would lose work" and missed["clouds"] == []
    text = render_report(missed)
    assert "ack: none received" in text and "WOULD LOSE WORK" in text

    dry = build_report(_episode(None, EpisodeState.DRY_RUN), 1.1, "alibaba")
    assert dry["verdict"] == "dry run"
    assert "\x1b[" not in render_report(fast) and "\x1b[" in render_report(fast, color=True)


def test_trainer_config_is_validated():
    cfg = parse_config(
        {"trainer": {"discover": ["nvml", "pidfile:/run/t.pid", "cmdline:torchrun|train\\.py"]}}
    )
    assert cfg.trainer.signal == "SIGUSR1"
    assert parse_config({"trainer": {"signal": "term"}}).trainer.signal == "SIGTERM"
    assert signal_number("SIGRTMIN+2") == signal.SIGRTMIN + 2
    bad = {
        "discover": ["gpu"],
        "signal": "SIGKILL",
        "http_url": "http://10.0.0.5:8080/ckpt",
        "request_file": "relative/path.json",
        "checkpoint_budget": "-5s",
    }
    with pytest.raises(ConfigError) as e:
        parse_config({"trainer": bad})
    text = e.value.render()
    assert "trainer.discover" in text and "unknown discovery 'gpu'" in text
    assert "SIGKILL cannot be handled" in text
    assert "10.0.0.5 is not loopback" in text
    assert "must be an absolute path" in text
    for spec, msg in (
        ("cmdline:([", "invalid regex"),
        ("pidfile:x.pid", "absolute"),
        ("cgroup:", "argument"),
    ):
        with pytest.raises(ConfigError, match=msg):
            parse_config({"trainer": {"discover": [spec]}})
    with pytest.raises(ConfigError, match="unknown signal"):
        parse_config({"trainer": {"signal": "SIGNOPE"}})


def test_a_component_stopped_before_its_ledger_was_read_keeps_the_file(tmp_path):
    """A reload right after a start stops a component whose ledger load has not run: writing its
    empty ledger then made the next component signal a notice the trainer had already acked."""
    from agent.checkpoint.component import CheckpointComponent
    from agent.context import Context
    from agent.core.events import EventBus
    from agent.snapshot import NodeSnapshot

    cfg = parse_config({"agent": {"state_dir": str(tmp_path), "runtime_dir": str(tmp_path / "run")}})
    path = tmp_path / "checkpoint-ledger.json"
    first = EpisodeLog(path)
    first.load()
    first.episodes["e1"] = _episode(3.0)
    first.save()
    snap = NodeSnapshot(seq=0, timestamp=0.0, monotonic=0.0)
    ctx = Context(cfg, EventBus(), lambda: snap, tmp_path, tmp_path / "run", [])

    async def start_and_stop() -> None:
        await CheckpointComponent(ctx).stop()

    asyncio.run(start_and_stop())
    again = EpisodeLog(path)
    again.load()
    assert list(again.episodes) == ["e1"]


def test_ledger_round_trip_and_corrupt_file_moved_aside(tmp_path):
    path = tmp_path / "checkpoint-ledger.json"
    led = EpisodeLog(path)
    led.load()  # none yet
    led.episodes["e1"] = _episode(3.0)
    led.save()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    again = EpisodeLog(path)
    again.load()
    assert again.episodes["e1"].duration == pytest.approx(3.0)

    path.write_text('{"version": 1, "episodes": {"e1": ')
    broken = EpisodeLog(path)
    broken.load()
    assert broken.episodes == {}
    [aside] = list(tmp_path.glob("checkpoint-ledger.json.corrupt-*"))
    assert aside.read_text().startswith('{"version"')

    old = _episode(1.0)
    old.finished_at = 1001.0
    led2 = EpisodeLog(path)
    led2.episodes = {"old": old}
    led2.prune(now=1001.0 + 8 * 86400)
    assert led2.episodes == {}
