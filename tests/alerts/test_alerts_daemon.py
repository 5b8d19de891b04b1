"""Alerts in the real daemon: the spool survives kill -9, secrets stay out of logs, status and
metrics, and ``test-alert`` prints the service's exact answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO, free_port, need_binary, write_toml
from fake_chat import FakeChat, slack_reply

FAST = {"backoff_initial": "100ms", "backoff_max": "300ms"}


def channel_status(agent, name: str) -> dict:
    return agent.status().get("alerts", {}).get("channels", {}).get(name, {})


def test_spool_survives_kill9_and_the_restart_delivers(agent_factory) -> None:
    port = free_port()
    fake = FakeChat(port)  # not started yet: the service is unreachable during the first run
    bot = fake.add("dingtalk", secret="SEC5d1e7b0e4f6a4c4b9b2f1d0c8a7e6f5d")
    cfg = {
        "alerts": {
            **FAST,
            "webhooks": [{"name": "ops", "type": "dingtalk", "url": bot.url, "secret": bot.secret}],
        }
    }
    agent = agent_factory(cfg)
    agent.wait_for(
        lambda: channel_status(agent, "ops").get("failed", {}).get("network"), what="a failed attempt"
    )
    assert channel_status(agent, "ops")["queued"] >= 1  # "Agent started", spooled
    first_pid = agent.proc.pid
    agent.kill9()
    with fake:
        agent.start()
        bot.wait(
            lambda b: sum("Agent started" in m["markdown"]["title"] for m in b.accepted) >= 2, timeout=20
        )
        agent.wait_for(lambda: channel_status(agent, "ops").get("queued") == 0, what="an empty queue")
    started = [m["markdown"]["text"] for m in bot.accepted if "Agent started" in m["markdown"]["title"]]
    assert len(started) == 2
    # the first run's alert, delivered by the second run, first
    assert f"**PID**: {first_pid}\n" in started[0] and f"**PID**: {agent.proc.pid}\n" in started[1]
    assert agent.stop() == 0


def test_secrets_never_reach_logs_status_or_metrics(agent_factory, tmp_path: Path) -> None:
    with FakeChat() as fake:
        ding = fake.add("dingtalk", secret="SECthe-secret-dingtalk-expects-0001")
        feishu = fake.add("feishu", secret="feishu-signing-secret-7f3a9c")
        slack = fake.add("slack")
        slack.script.extend([slack_reply(403, "invalid_token")] * 3)
        wecom_url = (
            f"{fake.base}/cgi-bin/webhook/send?key=0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"  # unknown key
        )
        feishu.script.append((200, {}, json.dumps({"code": 19024, "data": {}, "msg": "Key Words Not Found"})))
        secret_file = tmp_path / "feishu.secret"
        secret_file.write_text(feishu.secret + "\n")
        wrong_ding_secret = "SECa-wrong-dingtalk-secret-9999"
        env = {"DING_URL": ding.url, "DING_SECRET": wrong_ding_secret, "WECOM_URL": wecom_url}
        cfg = {
            "agent": {"log_level": "debug"},
            "alerts": {
                **FAST,
                "webhooks": [
                    {
                        "name": "ding",
                        "type": "dingtalk",
                        "url": {"env": "DING_URL"},
                        "secret": {"env": "DING_SECRET"},
                    },
                    {
                        "name": "lark",
                        "type": "feishu",
                        "url": feishu.url,
                        "secret": {"file": str(secret_file)},
                    },
                    {"name": "slack", "type": "slack", "url": slack.url},
                    {"name": "wecom", "type": "wecom", "url": {"env": "WECOM_URL"}},
                ],
            },
        }
        agent = agent_factory(cfg, env=env)
        for name in ("ding", "lark", "slack", "wecom"):
            agent.wait_for(lambda n=name: channel_status(agent, n).get("failed"), what=f"{name} refused")
        status = json.dumps(agent.status(), ensure_ascii=False)
        metrics = agent.metrics()
        assert agent.stop() == 0
    log = agent.log()
    secrets = {
        "dingtalk token": ding.token,
        "dingtalk secret": wrong_ding_secret,
        "feishu hook id": feishu.token,
        "feishu secret": feishu.secret,
        "slack path secret": slack.token.rsplit("/", 1)[1],
        "wecom key": wecom_url.rsplit("=", 1)[1],
    }
    for what, value in secrets.items():
        for where, text in (("log", log), ("status", status), ("metrics", metrics)):
            assert value not in text, f"{what} appears in the {where}"
    # the errors themselves are there, with each service's own words, and each logged once
    for words in ("sign not match", "Key Words Not Found", "invalid_token", "invalid webhook url"):
        assert words in status
        assert sum(words in line for line in log.splitlines()) == 1, words
    assert "***" in status  # URLs are shown redacted


def test_metrics_pass_promtool_and_shutdown_flushes_the_stopping_alert(agent_factory) -> None:
    promtool = need_binary("promtool", "prometheus")
    with FakeChat() as fake:
        bot = fake.add("wecom")
        cfg = {"alerts": {**FAST, "webhooks": [{"name": "ops", "type": "wecom", "url": bot.url}]}}
        agent = agent_factory(cfg)
        bot.wait(lambda b: b.accepted, what="the started alert")
        agent.wait_for(lambda: 'training_node_alerts_sent_total{channel="ops"} 1.0' in agent.metrics())
        text = agent.metrics()
        assert agent.stop() == 0
        contents = [m["markdown"]["content"] for m in bot.accepted]
        assert sum("Agent stopping" in c for c in contents) == 1, contents  # once, not again
    for family in ("sent_total", "failed_total", "dropped_total", "queue_depth"):
        assert f"training_node_alerts_{family}" in text
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert lint.stdout + lint.stderr == "", lint.stdout + lint.stderr


def _test_alert(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", "test-alert", "--config", str(config), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_test_alert_prints_the_exact_answer_and_fails_on_error(tmp_path: Path) -> None:
    with FakeChat() as fake:
        good = fake.add("wecom")
        bad = fake.add("dingtalk", secret="SECright")
        config = write_toml(
            tmp_path / "agent.toml",
            {
                "alerts": {
                    "language": "zh-CN",
                    "webhooks": [
                        {"name": "good", "type": "wecom", "url": good.url},
                        {"name": "bad", "type": "dingtalk", "url": bad.url, "secret": "SECwrong"},
                    ],
                }
            },
        )
        ok = _test_alert(config, "--channel", "good")
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert good.seen[-1].answer[2] in ok.stdout  # the service's body, byte for byte
        assert "=> delivered" in ok.stdout and "key=***" in ok.stdout and good.token not in ok.stdout
        assert "测试告警" in good.accepted[0]["markdown"]["content"]

        fail = _test_alert(config, "--channel", "bad")
        assert fail.returncode == 1
        assert '"errmsg": "sign not match"' in fail.stdout and "permanent config_error 310000" in fail.stdout
        assert bad.token not in fail.stdout and "SECwrong" not in fail.stdout

        both = _test_alert(config)
        assert both.returncode == 1 and both.stdout.count("HTTP 200") == 2

        unknown = _test_alert(config, "--channel", "nope")
        assert unknown.returncode == 2 and "configured: good, bad" in unknown.stderr

    gone = _test_alert(config, "--channel", "good")  # the service is down now
    assert gone.returncode == 1 and "no answer" in gone.stdout
