"""/api/v1/status on the TCP port against the control socket's full status, field by field, on a
live agent with every part switched on (fake GPUs with a compute process, a spot notice from the
metadata simulator, a checkpoint episode, a webhook channel), and the documented field list."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "deploy"))
from live_agent import live_agent

from agent.core.projection import Each, project, spec_paths
from agent.exporter.status import tcp_spec, tcp_view

REPO = Path(__file__).resolve().parents[2]

# (path in the full status, why it stays off the network)
REMOVED = [
    ("config", "a file path"),
    ("tasks.*.last_error", "error text quotes paths and peers"),
    ("http.web_config", "a file path"),
    ("http.basic_auth_users", "user names"),
    ("http.listen", "the bind address"),
    ("http.connections_closed", "abuse counters are for the operator"),
    ("snapshot.collectors.*.error", "error text quotes paths"),
    ("snapshot.gpus[].processes", "PIDs of the training processes"),
    ("snapshot.training_processes[].pid", "PIDs"),
    ("snapshot.training_processes[].comm", "process names"),
    ("checkpoint.discover", "command-line patterns, pid files, cgroup paths"),
    ("checkpoint.request_file", "a file path"),
    ("checkpoint.problems", "quote discovery paths"),
    ("checkpoint.lines", "quote all of the above"),
    ("checkpoint.targets[].pid", "PIDs"),
    ("checkpoint.targets[].comm", "process names"),
    ("checkpoint.active[].targets|checkpoint.recent[].targets", "PIDs and process names"),
    ("preemption.endpoint", "the metadata service address"),
    ("preemption.token", "token state"),
    ("preemption.sources", "request errors"),
    ("preemption.active[].raw", "the raw metadata document"),
    ("preemption.lines", "quote the endpoint"),
    ("alerts.channels.*.url", "webhook URLs (redacted or not)"),
    ("alerts.channels.*.last_error", "error text"),
    ("alerts.spool", "a file path"),
    ("alerts.node", "host identity"),
    ("recent_events", "raw events (paths, acks)"),
    ("classifier.learned", "internal baselines"),
    ("classifier.lines", "human text"),
]
KEPT = [
    "version",
    "healthy",
    "uptime_seconds",
    "tasks.*.running",
    "http.scheme",
    "snapshot.seq",
    "snapshot.collectors.*.success",
    "snapshot.gpus[].model",
    "snapshot.gpus[].utilization_ratio",
    "snapshot.gpus[].xid_counts",
    "snapshot.training_processes[].cpu_cores",
    "classifier.verdict",
    "classifier.scores",
    "preemption.provider",
    "preemption.active[].kind",
    "preemption.active[].deadline",
    "checkpoint.dry_run",
    "checkpoint.targets[].handler",
    "checkpoint.active[].phase|checkpoint.recent[].phase",
    "alerts.channels.*.state",
]


def values(data: Any, path: str) -> Iterator[Any]:
    """Every value at ``path``: ``a.b``, ``[]`` for each list item, ``*`` for each mapping value,
    ``p|q`` for either (the episode of the notice may be active or already recent)."""
    if "|" in path:
        for alternative in path.split("|"):
            yield from values(data, alternative)
        return
    head, _, rest = path.partition(".")
    many = head.endswith("[]")
    key = head.removesuffix("[]")
    if key == "*":
        items = list(data.values()) if isinstance(data, dict) else []
    elif isinstance(data, dict) and key in data:
        items = [data[key]]
    else:
        return
    if many:
        items = [x for item in items if isinstance(item, list) for x in item]
    for item in items:
        if rest:
            yield from values(item, rest)
        else:
            yield item


@pytest.fixture(scope="module")
def faces(tmp_path_factory) -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, str]]]:
    with live_agent(tmp_path_factory.mktemp("live")) as live:
        live.notice(300)  # a notice: an active preemption entry and a checkpoint episode
        a = live.agent
        a.wait_for(lambda: a.status()["checkpoint"]["active"] or a.status()["checkpoint"]["recent"])
        full, tcp = a.status(), a.tcp_status()
        secrets = {
            "config path": str(a.config_path),
            "state dir": str(a.state_dir),
            "request file": full["checkpoint"]["request_file"],
            "metadata endpoint": live.sim.url,
        }
        yield full, tcp, secrets


@pytest.mark.parametrize(("path", "why"), REMOVED)
def test_field_stays_off_the_network(faces, path, why):
    full, tcp, _ = faces
    assert list(values(full, path)), f"{path} should exist in the full status (test fixture)"
    assert not list(values(tcp, path)), f"{path} is on the TCP port ({why})"


@pytest.mark.parametrize("path", KEPT)
def test_field_is_on_both_faces(faces, path):
    full, tcp, _ = faces
    assert list(values(full, path)) and list(values(tcp, path)), path


def test_no_sensitive_value_anywhere_in_the_network_view(faces):
    full, tcp, secrets = faces
    full_text, tcp_text = json.dumps(full), json.dumps(tcp)
    trainer = full["snapshot"]["gpus"][0]["processes"][0]["pid"]
    for what, value in {**secrets, "trainer pid": f'"pid": {trainer}'}.items():
        assert value in full_text, what  # the test would see it if it leaked
        assert value not in tcp_text, what


def test_every_shown_field_is_listed(faces):
    """Nothing on the TCP face that the allowlist does not name: project() of the TCP view with the
    same spec changes nothing, and sections not listed (the goodput ledger, say) are absent."""
    full, tcp, _ = faces
    assert project(tcp, tcp_spec()) == tcp
    assert set(tcp) <= set(tcp_spec())
    assert set(full) - set(tcp_spec()), "the full status has sections the TCP face leaves out"


def test_projection_keeps_structure():
    spec = {"a": True, "b": Each({"x": True}), "c": {"d": True}}
    data = {"a": 1, "b": {"k1": {"x": 2, "y": 3}}, "c": {"d": 4, "e": 5}, "z": 6}
    assert project(data, spec) == {"a": 1, "b": {"k1": {"x": 2}}, "c": {"d": 4}}
    assert project({"b": [{"x": 1, "y": 2}]}, spec) == {"b": [{"x": 1}]}
    assert tcp_view({"config": "/etc/x", "version": "1"}) == {"version": "1"}


def test_the_documented_field_list_is_the_allowlist():
    text = (REPO / "docs" / "security.md").read_text()
    block = re.search(r"<!-- tcp-status-fields -->\n```\n(.*?)```", text, re.S)
    assert block, "docs/security.md lacks the tcp-status-fields block"
    assert block.group(1).split() == spec_paths(tcp_spec())
