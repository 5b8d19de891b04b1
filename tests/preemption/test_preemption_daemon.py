"""The real daemon (``training-node-agent run``) with [preemption] pointed at a real metadata-sim
subprocess: /metrics, /api/v1/status, restarts, and auto-detection that sends nothing without DMI
evidence."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import need_binary
from preemption_helpers import REPO, guarded_env, sim_process  # noqa: F401

FAST = {"poll_interval": "200ms", "maintenance_interval": "200ms", "max_requests_per_second": 20}


def _preemption(agent) -> dict:
    return agent.status()["preemption"]


def _metric(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def _wait_for_polls(agent, polls: int) -> None:
    """Every metadata source reads ``polls`` more times, counted: a slow box waits longer, never tests
    less."""
    start = {name: src["reads"] for name, src in _preemption(agent)["sources"].items()}

    def polled() -> bool:
        sources = _preemption(agent)["sources"]
        return bool(sources) and all(
            src["reads"] >= start.get(name, 0) + polls for name, src in sources.items()
        )

    agent.wait_for(polled, what=f"{polls} more reads from every metadata source")


def test_daemon_reports_a_notice_in_metrics_and_status(agent_factory, sim_process, tmp_path):  # noqa: F811
    sim = sim_process("alibaba", "--require-token")
    agent = agent_factory({"preemption": {"provider": "alibaba", "endpoint": sim.url, **FAST}})
    agent.wait_for(lambda: (_preemption(agent).get("instance") or {}).get("instance_id"), what="identity")
    notice = sim.control("/notice", {"kind": "spot-termination", "seconds": 300})
    maint = sim.control("/maintenance", {"kind": "reboot", "seconds": 86400})
    status = agent.wait_for(
        lambda: len(_preemption(agent)["active"]) == 2 and _preemption(agent), what="notices"
    )
    by_kind = {n["kind"]: n for n in status["active"]}
    assert by_kind["maintenance-reboot"]["event_id"] == maint["id"]
    assert 290 < by_kind["spot-termination"]["seconds_remaining_at_receipt"] <= 300
    assert by_kind["spot-termination"]["remaining_seconds"] <= 300
    assert any(line.startswith("NOTICE spot-termination") for line in status["lines"])
    assert status["provider"] == "alibaba" and status["token"].startswith("token valid")

    text = agent.metrics()
    assert _metric(text, "training_node_preemption_notice", kind="spot-termination") == 1
    assert _metric(text, "training_node_preemption_notice", kind="maintenance-stop") == 0
    deadline = _metric(text, "training_node_preemption_deadline_timestamp_seconds", kind="spot-termination")
    announced = notice["announced_wall"]
    assert abs(deadline - (announced + 300)) <= 1
    assert (
        290
        < _metric(text, "training_node_preemption_notice_remaining_seconds", kind="spot-termination")
        <= 300
    )
    assert _metric(text, "training_node_metadata_requests_total", provider="alibaba", outcome="ok") > 5
    assert (
        _metric(
            text,
            "training_node_instance_info",
            provider="alibaba",
            instance_id="i-sim0a1b2c3d4e5f6a7b",
            instance_type="ecs.gn7i-c8g1.2xlarge",
            region="cn-hangzhou",
            zone="cn-hangzhou-i",
        )
        == 1
    )
    promtool = need_binary("promtool", "prometheus")
    lint = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), (
        lint.stdout + lint.stderr
    )

    # the human status face shows the countdown too
    out = subprocess.run(
        [sys.executable, "-m", "agent", "status", "--control-socket", agent.control_socket],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=20,
    )
    assert "[preemption]" in out.stdout and "NOTICE spot-termination" in out.stdout and "left" in out.stdout

    sim.control("/cancel", {"id": maint["id"]})
    agent.wait_for(lambda: len(_preemption(agent)["active"]) == 1, what="withdrawal")
    withdrawn = [e for e in agent.status()["recent_events"] if e.get("withdrawn")]
    assert [e["event_id"] for e in withdrawn] == [maint["id"]]


def test_daemon_restart_during_a_notice_does_not_announce_it_again(agent_factory, sim_process):  # noqa: F811
    sim = sim_process("aws")
    cfg = {"preemption": {"provider": "aws", "endpoint": sim.url, **FAST}}
    agent = agent_factory(cfg, name="node")
    sim.control("/notice", {"kind": "spot-termination", "seconds": 120})
    agent.wait_for(lambda: _preemption(agent)["active"], what="notice")
    [announced] = [e for e in agent.log_lines() if e.get("event") == "preemption notice"]
    assert agent.stop() == 0
    first_run = len(agent.log_lines())

    again = agent_factory(cfg, name="node")  # same state dir (and the same, appended, log file)
    again.wait_for(lambda: "restored after restart" in again.log(), what="restore")
    _wait_for_polls(again, 3)  # several polls of the still-present notice
    lines = again.log_lines()[first_run:]
    assert not [e for e in lines if e.get("event") == "preemption notice"], "announced again as new"
    restored = [e for e in lines if e.get("event") == "preemption notice restored after restart"]
    assert [e["event_id"] for e in restored] == [announced["event_id"]]
    events = [e for e in again.status()["recent_events"] if e.get("type") == "preemption"]
    assert [(e["event_id"], e["replayed"]) for e in events] == [(announced["event_id"], True)]
    assert len(_preemption(again)["active"]) == 1


def test_auto_without_dmi_evidence_sends_no_request(agent_factory, tmp_path):
    env, blocked, connects = guarded_env(tmp_path)
    sysfs = tmp_path / "sys"
    (sysfs / "class" / "dmi" / "id").mkdir(parents=True)  # present but empty: no evidence
    agent = agent_factory(
        {"agent": {"sysfs": str(sysfs)}, "preemption": {"provider": "auto", **FAST}}, env=env
    )
    status = _preemption(agent)
    assert status["provider"] == "none" and status["enabled"] is False
    assert "no DMI information" in status["selected_by"]
    # the daemon's own ticks, counted: its interval (200 ms) is the poll interval the watcher would use
    first = agent.status()["snapshot"]["seq"]
    agent.wait_for(lambda: agent.status()["snapshot"]["seq"] >= first + 5, what="5 more ticks")
    status = _preemption(agent)
    assert status["requests"] == {} and status["sources"] == {}
    assert "training_node_metadata_requests_total" not in agent.metrics()
    assert "off: provider none" in status["lines"][0]
    agent.stop()
    assert blocked.read_text() == "", "a non-local connection was attempted"
    assert connects.read_text() == "", f"the agent made IP connections: {connects.read_text()}"


def test_guard_catches_the_real_metadata_address(agent_factory, tmp_path):
    # the positive control for the test above: with Alibaba DMI evidence and no endpoint override the
    # agent does try 100.100.100.200, and the guard stops and records it: never sent
    env, blocked, connects = guarded_env(tmp_path)
    dmi = tmp_path / "sys" / "class" / "dmi" / "id"
    dmi.mkdir(parents=True)
    (dmi / "sys_vendor").write_text("Alibaba Cloud\n")
    (dmi / "product_name").write_text("Alibaba Cloud ECS\n")
    agent = agent_factory(
        {"agent": {"sysfs": str(tmp_path / "sys")}, "preemption": {"provider": "auto", **FAST}}, env=env
    )
    status = agent.wait_for(
        lambda: _preemption(agent)["requests"].get("connection_error") and _preemption(agent)
    )
    assert status["provider"] == "alibaba" and status["endpoint"] == "http://100.100.100.200"
    assert "auto: DMI sys_vendor='Alibaba Cloud'" in status["selected_by"]
    agent.stop()
    assert "100.100.100.200" in blocked.read_text()
    assert "100.100.100.200" not in connects.read_text()  # blocked before any packet


def test_reload_keeps_notices(agent_factory, sim_process):  # noqa: F811
    sim = sim_process("tencent")
    agent = agent_factory({"preemption": {"provider": "tencent", "endpoint": sim.url, **FAST}})
    sim.control("/notice", {"seconds": 300})
    agent.wait_for(lambda: _preemption(agent)["active"], what="notice")
    reloads = agent.status()["reloads"]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent",
            "reload",
            "--control-socket",
            agent.control_socket,
            "-c",
            str(agent.config_path),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=20,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert agent.status()["reloads"] == reloads + 1  # done when the command returns: parts built anew
    _wait_for_polls(agent, 3)  # the new watcher reads the still-present notice several times
    assert len(_preemption(agent)["active"]) == 1
    new = [e for e in agent.log_lines() if e.get("event") == "preemption notice"]
    assert len(new) == 1, json.dumps(new)
