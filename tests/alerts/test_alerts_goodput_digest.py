"""The goodput digest: the real daemon's ledger sent to the local fake chat services, in Chinese to
DingTalk and Feishu and in English to Slack and WeCom, each signed and shaped as the service wants;
and when the daily one is due."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from conftest import need_binary
from fake_chat import FakeChat

from agent.devtools.fake_nvml import FakeNvml, device, library_dir
from agent.ledger.component import next_digest
from agent.runtime.control import control_request


def test_digest_reaches_every_channel_in_its_language(agent_factory, tmp_path) -> None:
    need_binary("cc", "build-essential")
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        nvml = FakeNvml(
            tmp_path / "nvml.json",
            gpus=[
                device(0, utilization_gpu=97, sm_active=85.0, processes=[{"pid": trainer.pid}]),
                device(1, utilization_gpu=10, sm_active=1.0, processes=[{"pid": trainer.pid}]),
            ],
        )
        env = {"LD_LIBRARY_PATH": str(library_dir()), "FAKE_NVML_STATE": str(nvml.path)}
        with FakeChat() as fake:
            ding = fake.add("dingtalk", secret="SEC0123456789abcdef0123456789abcdef")
            feishu = fake.add("feishu", secret="feishu-digest-secret")
            slack = fake.add("slack")
            wecom = fake.add("wecom")
            hooks = [
                {
                    "name": "ding",
                    "type": "dingtalk",
                    "url": ding.url,
                    "secret": ding.secret,
                    "language": "zh-CN",
                },
                {
                    "name": "lark",
                    "type": "feishu",
                    "url": feishu.url,
                    "secret": feishu.secret,
                    "language": "zh-CN",
                },
                {"name": "slack", "type": "slack", "url": slack.url, "language": "en"},
                {"name": "wecom", "type": "wecom", "url": wecom.url, "language": "en", "events": ["goodput"]},
            ]
            cfg = {
                "goodput": {"resolution": "1s", "digest": True, "digest_at": "03:00"},
                "cost": {"currency": "CNY", "instance_hour_price": 36.0},
                "alerts": {"webhooks": hooks, "backoff_initial": "100ms", "backoff_max": "300ms"},
            }
            agent = agent_factory(cfg, env=env)
            agent.wait_for(lambda: agent.status()["goodput"]["gpu_seconds"] > 4, what="GPU-seconds booked")
            code, body = asyncio.run(control_request(agent.control_socket, "POST", "/goodput/digest"))
            assert code == 200 and body["ok"], body

            def digests(bot, key) -> list[str]:
                return [
                    json.dumps(m, ensure_ascii=False)
                    for m in bot.accepted
                    if key in json.dumps(m, ensure_ascii=False)
                ]

            for bot, key in (
                (ding, "有效算力占比"),
                (feishu, "有效算力占比"),
                (slack, "Goodput"),
                (wecom, "Goodput"),
            ):
                bot.wait(lambda b, k=key: digests(b, k), timeout=20, what=f"the digest on {bot.service}")
            zh = digests(ding, "有效算力占比")[0]
            print(zh)
            assert "有效计算" in zh and "有任务但空闲" in zh  # bucket names in Chinese
            assert "CNY" in zh and "GPU 时" in zh
            en = digests(slack, "Goodput")[0]
            print(en)
            assert "productive" in en and "idle with a job" in en and "Spent" in en
            # half the GPUs work: goodput about 50%, in both
            status = agent.status()["goodput"]
            assert 0.4 < status["ratio"] < 0.6
            assert "Most lost to" in en and "有任务但空闲" in digests(feishu, "有效算力占比")[0]
            # the WeCom channel takes goodput events only: the agent's start was not sent there
            assert all("Goodput" in json.dumps(m) for m in wecom.accepted)
    finally:
        trainer.kill()
        trainer.wait()


@pytest.mark.parametrize(
    "now, at, zone, due",
    [
        ("2026-12-01T07:30:00+00:00", "09:00", "UTC", "2026-12-01T09:00:00+00:00"),
        ("2026-12-01T09:00:00+00:00", "09:00", "UTC", "2026-12-02T09:00:00+00:00"),  # just sent: tomorrow
        ("2026-12-01T02:00:00+00:00", "09:00", "Asia/Shanghai", "2026-12-02T01:00:00+00:00"),
        # 10:00 EST on the eve of the switch to summer time: 09:00 EDT is 23 h later, not 24
        ("2026-03-07T15:00:00+00:00", "09:00", "America/New_York", "2026-03-08T13:00:00+00:00"),
    ],
)
def test_the_daily_digest_is_due_at_digest_at_in_the_alerts_timezone(now, at, zone, due) -> None:
    ts = datetime.fromisoformat(now).timestamp()
    assert datetime.fromtimestamp(next_digest(ts, at, zone), UTC) == datetime.fromisoformat(due)
