"""The generic webhook speaks Alertmanager's webhook format: the real ``prometheus-alertmanager``
takes our alerts through its API and sends its own webhook for them; that payload and ours have the
same shape, and both pass the schema check the fake receiver applies."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from conftest import free_port, http_get, need_binary
from fake_chat import FakeChat, alertmanager_problems

from agent.alerts.kinds import facts, render
from agent.alerts.message import NodeIdentity
from agent.alerts.render import digest
from agent.alerts.scene import GpuInfo, Scene
from agent.alerts.services.webhook import ZERO_TIME, payload
from agent.core.events import GpuFaultEvent, PreemptionEvent

FREE_FORM = {"labels", "annotations", "groupLabels", "commonLabels", "commonAnnotations"}


def shape(value: Any, key: str = "") -> Any:
    """Keys and value types, with the free-form label/annotation maps reduced to "map"."""
    if key in FREE_FORM:
        return "map"
    if isinstance(value, dict):
        return {k: shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


@pytest.fixture
def alertmanager(tmp_path: Path):
    binary = need_binary("prometheus-alertmanager", "prometheus-alertmanager")
    with FakeChat() as fake:
        capture = fake.add("receiver")
        port = free_port()
        conf = tmp_path / "alertmanager.yml"
        conf.write_text(
            "route:\n  receiver: capture\n  group_by: [node]\n  group_wait: 0s\n  group_interval: 1s\n"
            "  repeat_interval: 1h\nreceivers:\n  - name: capture\n    webhook_configs:\n"
            f"      - url: {capture.url}\n        send_resolved: true\n"
        )
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={conf}",
                f"--storage.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if http_get(f"http://127.0.0.1:{port}/-/ready", timeout=1)[0] == 200:
                        break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"alertmanager did not start: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
                time.sleep(0.1)
            yield f"http://127.0.0.1:{port}", capture
        finally:
            proc.terminate()
            proc.wait(10)


def ours() -> dict[str, Any]:
    now = datetime.now(UTC)
    scene = Scene(
        NodeIdentity("gpu-node-17", "i-bp1abc", "ecs.gn7e", "cn-wulanchabu"),
        (GpuInfo(3, "A100"),),
        ZoneInfo("UTC"),
        now,
    )
    events = [
        PreemptionEvent("alibaba", "spot-termination", "e-1", now + timedelta(seconds=287), now),
        GpuFaultEvent("xid", 3, "GPU-3", "A100", "fallen off the bus", 79, now),
    ]
    msgs = [render(e, facts(e), scene, "en") for e in events]  # type: ignore[arg-type]
    return payload(digest(msgs, "en", ZoneInfo("UTC"), now), "capture", "https://grafana.example/d/node")


def test_real_alertmanager_accepts_our_alerts_and_sends_the_same_shape(alertmanager) -> None:
    base, capture = alertmanager
    mine = ours()
    assert alertmanager_problems(mine) == []
    postable = [
        {k: a[k] for k in ("labels", "annotations", "startsAt", "generatorURL")}
        | ({} if a["endsAt"] == ZERO_TIME else {"endsAt": a["endsAt"]})
        for a in mine["alerts"]
    ]
    req = urllib.request.Request(
        f"{base}/api/v2/alerts",
        json.dumps(postable).encode(),
        {"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200  # Alertmanager validated label names, times and the URL
    capture.wait(
        lambda b: b.accepted and len(b.accepted[-1]["alerts"]) == 2, timeout=20, what="Alertmanager's webhook"
    )
    theirs = capture.accepted[-1]
    assert alertmanager_problems(theirs) == []  # the schema the fake receiver checks fits the real thing
    assert shape(mine) == shape(theirs)
    assert shape(mine["alerts"][0]) == shape(theirs["alerts"][0])
    by_name = {a["labels"]["alertname"]: a for a in theirs["alerts"]}
    for a in mine["alerts"]:
        twin = by_name[a["labels"]["alertname"]]
        assert twin["labels"] == a["labels"] and twin["annotations"] == a["annotations"]
        assert twin["status"] == a["status"] == "firing" and twin["endsAt"] == ZERO_TIME
    assert theirs["groupLabels"] == mine["groupLabels"] == {"node": "gpu-node-17"}
    assert theirs["version"] == mine["version"] == "4"
