"""Events -> messages: both languages, the node, the GPUs concerned, verdict/reasons/hint, countdown."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from agent.alerts import i18n
from agent.alerts.kinds import facts, render
from agent.alerts.message import Message, NodeIdentity
from agent.alerts.render import build_test_alert, digest, reminder
from agent.alerts.scene import GpuInfo, Scene
from agent.core.events import (
    AgentLifecycleEvent,
    CheckpointEvent,
    CollectorFailingEvent,
    GpuFaultEvent,
    InstanceIdentityEvent,
    JobAdviceEvent,
    PreemptionEvent,
    VerdictEvent,
)
from agent.devtools import alert_examples as examples

NOW = datetime(2025, 3, 14, 6, 21, 13, tzinfo=UTC)
NODE = NodeIdentity(
    "gpu-node-17", "i-bp1f2x9kq3c8lmn0v7wz", "ecs.gn7e-c16g1.32xlarge", "cn-wulanchabu", None, "alibaba"
)
GPUS = tuple(GpuInfo(i, "NVIDIA A100-SXM4-80GB", f"GPU-{i}") for i in range(8))
CJK = re.compile(r"[\u4e00-\u9fff]")
REPO = Path(__file__).resolve().parents[2]


def scene(tz: str = "UTC") -> Scene:
    return Scene(NODE, GPUS, ZoneInfo(tz), NOW)


def spot(seconds: float | None = 287, **kw) -> PreemptionEvent:
    deadline = NOW + timedelta(seconds=seconds) if seconds is not None else None
    return PreemptionEvent("alibaba", "spot-termination", "e-1", deadline, NOW, **kw)


def verdict(cleared: bool = False) -> VerdictEvent:
    return VerdictEvent(
        "data",
        "nfs-read",
        ("NFS read RTT 38 ms", "iowait 61%"),
        "Stage the dataset on local NVMe",
        NOW - timedelta(minutes=14),
        gpus=(0, 1, 2, 3, 5),
        cleared=cleared,
    )


EVENTS = {
    "spot": spot(),
    "spot-no-deadline": spot(None),
    "spot-withdrawn": spot(withdrawn=True),
    "maintenance-drill": PreemptionEvent("drill", "maintenance-reboot", "d-1", NOW, NOW, drill=True),
    "checkpoint-requested": CheckpointEvent(
        "requested", "e-1", "spot-termination", NOW + timedelta(seconds=280), NOW
    ),
    "checkpoint-completed": CheckpointEvent(
        "completed", "e-1", "spot-termination", None, NOW, 41.5, ("pid 4242",)
    ),
    "checkpoint-missed": CheckpointEvent("missed", "e-1", "spot-termination", NOW, NOW),
    "checkpoint-unreachable": CheckpointEvent(
        "unreachable", "e-1", "spot-termination", None, NOW, detail="EPERM"
    ),
    "checkpoint-no-target": CheckpointEvent("no-target", "e-1", "spot-termination", None, NOW),
    "verdict": verdict(),
    "verdict-cleared": verdict(cleared=True),
    "xid": GpuFaultEvent(
        "xid", 3, "GPU-3", "NVIDIA A100-SXM4-80GB", "Xid 79: GPU has fallen off the bus", 79, NOW
    ),
    "gpu-lost": GpuFaultEvent("lost", 5, "GPU-5", "NVIDIA A100-SXM4-80GB", at=NOW),
    "ecc": GpuFaultEvent("ecc", 2, "GPU-2", "NVIDIA A100-SXM4-80GB", "3 uncorrectable", at=NOW),
    "thermal": GpuFaultEvent("thermal-throttle", 1, "GPU-1", "NVIDIA A100-SXM4-80GB", at=NOW),
    "power-cleared": GpuFaultEvent(
        "power-throttle", 1, "GPU-1", "NVIDIA A100-SXM4-80GB", at=NOW, cleared=True
    ),
    "collector": CollectorFailingEvent("gpu", "NVML_ERROR_UNKNOWN", 65.0),
    "collector-cleared": CollectorFailingEvent("gpu", "", 0.0, cleared=True),
    "job-advice": JobAdviceEvent(
        "4127",
        "input",
        ("fix the input first: on any card the data wait stays 62% of each step",),
        at=NOW,
    ),
    "agent-started": AgentLifecycleEvent("started", "0.1.0"),
    "agent-stopping": AgentLifecycleEvent("stopping", "0.1.0"),
}


@pytest.mark.parametrize("name", sorted(EVENTS))
@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_every_alert_names_the_node_and_gpus_in_its_language(name: str, lang: str) -> None:
    event = EVENTS[name]
    f = facts(event)
    assert f is not None
    msg = render(event, f, scene(), lang)
    labels = dict(msg.fields)
    node_label, gpu_label = ("节点", "GPU") if lang == "zh-CN" else ("Node", "GPUs")
    assert "gpu-node-17" in msg.title
    assert (
        labels[node_label] == "gpu-node-17 · i-bp1f2x9kq3c8lmn0v7wz · ecs.gn7e-c16g1.32xlarge · cn-wulanchabu"
    )
    assert "A100" in labels[gpu_label]
    words = msg.title + "".join(k for k, _ in msg.fields)
    if lang == "zh-CN":
        assert CJK.search(words), msg.title
    else:
        assert not CJK.search(words), msg.title
    assert msg.resolved == f.resolved
    assert Message.from_dict(msg.to_dict()) == msg


def test_a_job_s_advice_at_its_end_is_a_goodput_message_with_its_lines() -> None:
    event = EVENTS["job-advice"]
    f = facts(event)
    assert f is not None and f.kind == "goodput" and f.fingerprint == "advice/4127/" + f"{NOW:%Y%m%dT%H%M%S}"
    msg = render(event, f, scene(), "en")
    assert msg.title == "Job 4127 ended on gpu-node-17: what to rent next time"
    assert dict(msg.fields)["Binds"] == "input" and msg.lines == event.lines
    assert ("advised_job", "4127") in msg.labels
    zh = render(event, f, scene(), "zh-CN")
    assert zh.title == "gpu-node-17 作业 4127 已结束：下次租用建议" and dict(zh.fields)["瓶颈"] == "input"


def test_spot_notice_counts_down_in_both_languages() -> None:
    en = render(spot(), facts(spot()), scene(), "en")  # type: ignore[arg-type]
    zh = render(spot(), facts(spot()), scene("Asia/Shanghai"), "zh-CN")  # type: ignore[arg-type]
    assert en.title == "Spot termination in 4m 47s on gpu-node-17"
    assert zh.title == "gpu-node-17 抢占式实例回收，剩余 4分47秒"
    assert dict(en.fields)["Deadline"] == "2025-03-14 06:26:00 UTC"
    assert dict(zh.fields)["截止时间"] == "2025-03-14 14:26:00 CST"
    assert dict(en.fields)["Cloud"] == "Alibaba Cloud" and dict(zh.fields)["云平台"] == "阿里云"
    assert en.priority and en.severity == "critical" and en.deadline == NOW + timedelta(seconds=287)


def test_notice_without_deadline_says_act_now() -> None:
    msg = render(spot(None), facts(spot(None)), scene(), "en")  # type: ignore[arg-type]
    assert msg.title == "Spot termination now on gpu-node-17"
    assert dict(msg.fields)["Deadline"] == "none given: act now"


def test_verdict_carries_reasons_hint_and_only_its_gpus() -> None:
    msg = render(verdict(), facts(verdict()), scene(), "en")  # type: ignore[arg-type]
    assert msg.title == "Data-bound (nfs-read) on gpu-node-17"
    assert msg.lines == ("NFS read RTT 38 ms", "iowait 61%")
    assert msg.hint == ("Hint", "Stage the dataset on local NVMe")
    assert dict(msg.fields)["GPUs"] == "5 × NVIDIA A100-SXM4-80GB (0-3,5)"
    cleared = render(verdict(True), facts(verdict(True)), scene(), "zh-CN")  # type: ignore[arg-type]
    assert cleared.title.startswith("【已恢复】") and cleared.resolved and not cleared.hint
    assert dict(cleared.fields)["持续时长"] == "14分"


def test_facts_route_and_group() -> None:
    assert facts(InstanceIdentityEvent("alibaba", "i-1")) is None
    a, b = facts(verdict()), facts(verdict(True))
    assert a and b and a.fingerprint == b.fingerprint and b.resolved and a.sustained and a.held
    fatal = facts(EVENTS["xid"])
    app = facts(GpuFaultEvent("xid", 3, "GPU-3", "A100", xid=13))
    assert fatal and app and fatal.severity == "critical" and app.severity == "warning"
    assert not fatal.sustained and fatal.fingerprint != app.fingerprint
    started = [facts(AgentLifecycleEvent("started", "1")) for _ in range(2)]
    assert started[0] and started[1] and started[0].fingerprint != started[1].fingerprint
    assert facts(spot(withdrawn=True)).priority is False  # type: ignore[union-attr]


def test_digest_counts_and_lists_every_member() -> None:
    msgs = [render(e, facts(e), scene(), "en") for e in (EVENTS["xid"], EVENTS["thermal"], EVENTS["verdict"])]  # type: ignore[arg-type]
    d = digest(msgs, "en", ZoneInfo("UTC"), NOW)
    assert d.count == 3 and d.title == "3 alerts on gpu-node-17"
    assert d.severity == "critical"  # the worst member
    assert len(d.lines) == 3 and all(m.title in line for m, line in zip(msgs, d.lines, strict=True))
    nested = digest([d, msgs[0]], "zh-CN", ZoneInfo("UTC"), NOW)
    assert nested.count == 4 and nested.title == "gpu-node-17 告警汇总：共 4 条"
    assert Message.from_dict(nested.to_dict()) == nested


def test_reminder_and_test_message() -> None:
    msg = render(verdict(), facts(verdict()), scene(), "en")  # type: ignore[arg-type]
    again = reminder(msg, ZoneInfo("UTC"))
    assert again.lines[-1] == "Still active since 2025-03-14 06:07:13 UTC."
    t = build_test_alert(scene(), "zh-CN", "ops")
    assert t.title == "gpu-node-17 测试告警" and ("通道", "ops") in t.fields


@pytest.mark.parametrize(
    ("seconds", "en", "zh"),
    [
        (287, "4m 47s", "4分47秒"),
        (45, "45s", "45秒"),
        (3600, "1h", "1小时"),
        (3725, "1h 2m", "1小时2分"),
        (0.4, "0s", "0秒"),
    ],
)
def test_durations(seconds: float, en: str, zh: str) -> None:
    assert i18n.duration(seconds, "en") == en
    assert i18n.duration(seconds, "zh-CN") == zh


def test_examples_document_is_current() -> None:
    on_disk = (REPO / "docs" / "alerts-examples.md").read_text()
    assert on_disk == examples.document(), (
        "regenerate: python -m agent.devtools.alert_examples > docs/alerts-examples.md"
    )
