"""The alerts component against the fake services: signing, retries, rate limits and digests, dedup,
resolve, hold, reminders, the bounded spool, and nothing dropped without a count."""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import UTC, datetime, timedelta

import pytest
from alerts_support import Running, config, context, counter, message_text, represented, until
from fake_chat import FakeChat, dingtalk_reply, feishu_reply, slack_reply, wecom_reply

from agent.alerts.alerter import Alerter
from agent.core.events import (
    CollectorFailingEvent,
    GpuFaultEvent,
    InstanceIdentityEvent,
    PreemptionEvent,
    VerdictEvent,
)


@pytest.fixture
def fake():
    with FakeChat() as f:
        yield f


def now() -> datetime:
    return datetime.now(UTC)


def data_verdict(cleared: bool = False) -> VerdictEvent:
    return VerdictEvent(
        "data",
        "nfs-read",
        ("NFS read RTT 38 ms",),
        "Stage the dataset locally",
        now(),
        gpus=(0, 1),
        cleared=cleared,
    )


def spot() -> PreemptionEvent:
    return PreemptionEvent("alibaba", "spot-termination", "e-1", now() + timedelta(seconds=287), now())


def channel(name: str, bot, **kw) -> dict:
    """A channel to ``bot``; its rate limit is loose unless a test is about the limit."""
    kind = "webhook" if bot.service == "receiver" else bot.service
    return {"name": name, "type": kind, "url": bot.url, "rate_limits": ["50/1s"], **kw}


# --- signing -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("service", ["dingtalk", "feishu"])
async def test_signed_messages_are_accepted_with_node_gpus_and_verdict(fake, tmp_path, service) -> None:
    bot = fake.add(service, secret="SEC0123456789abcdef")
    cfg = config(tmp_path, [channel("ops", bot, secret="SEC0123456789abcdef")])
    async with Running(cfg) as (alerter, bus):
        bus.publish(InstanceIdentityEvent("alibaba", "i-bp1abc", "ecs.gn7e-c16g1.32xlarge", "cn-wulanchabu"))
        bus.publish(data_verdict())
        await until(lambda: bot.accepted, what="the verdict")
        text = message_text(bot.accepted[0])
        for part in (
            "Data-bound (nfs-read)",
            "i-bp1abc",
            "ecs.gn7e-c16g1.32xlarge",
            "cn-wulanchabu",
            "2 × NVIDIA A100-SXM4-80GB (0-1)",
            "NFS read RTT 38 ms",
            "Stage the dataset locally",
        ):
            assert part in text, part
        # the service answered before the sender read the answer and counted it: wait for the count
        sent = await until(
            lambda: counter(alerter, "training_node_alerts_sent_total", channel="ops"), what="count"
        )
        assert sent == 1
        assert alerter.status()["channels"]["ops"]["state"] == "ok"


@pytest.mark.parametrize(("service", "code"), [("dingtalk", "310000"), ("feishu", "19021")])
async def test_wrong_secret_is_refused_once_and_not_retried(fake, tmp_path, service, code) -> None:
    bot = fake.add(service, secret="the-right-secret")
    cfg = config(tmp_path, [channel("ops", bot, secret="a-wrong-secret")])
    async with Running(cfg) as (alerter, bus):
        bus.publish(data_verdict())
        await until(
            lambda: counter(alerter, "training_node_alerts_dropped_total", channel="ops"), what="the drop"
        )
        await asyncio.sleep(0.4)  # several backoff periods: a retry would have happened by now
        assert len(bot.seen) == 1 and not bot.accepted
        assert (
            counter(alerter, "training_node_alerts_dropped_total", channel="ops", reason="permanent_error")
            == 1
        )
        assert (
            counter(alerter, "training_node_alerts_failed_total", channel="ops", reason="config_error") == 1
        )
        st = alerter.status()["channels"]["ops"]
        assert st["state"] == "failing" and code in st["last_error"] and "sign" in st["last_error"]


# --- retries -----------------------------------------------------------------------------------------

RATE_LIMITS = [
    ("dingtalk", dingtalk_reply(130101)),
    ("dingtalk", dingtalk_reply(410100)),
    ("feishu", feishu_reply(11232)),
    ("feishu", feishu_reply(9499, 429, {"x-ogw-ratelimit-reset": "0.2"})),
    ("wecom", wecom_reply(45009)),
    ("slack", slack_reply(429, "rate_limited", {"Retry-After": "0.2"})),
]


@pytest.mark.parametrize(
    ("service", "limited"), RATE_LIMITS, ids=[f"{s}-{r[2][:24]}" for s, r in RATE_LIMITS]
)
async def test_rate_limit_answers_are_retried_until_delivered(fake, tmp_path, service, limited) -> None:
    bot = fake.add(service)
    bot.script.extend([limited, limited])
    async with Running(config(tmp_path, [channel("ops", bot)])) as (alerter, bus):
        bus.publish(data_verdict())
        # the agent's count, not the service's: the service has the message before the agent has
        # its answer
        await until(
            lambda: counter(alerter, "training_node_alerts_sent_total", channel="ops"),
            what="delivery after two rate-limit answers",
        )
        assert len(bot.seen) == 3 and len(bot.accepted) == 1
        assert (
            counter(alerter, "training_node_alerts_failed_total", channel="ops", reason="rate_limited") == 2
        )
        assert counter(alerter, "training_node_alerts_sent_total", channel="ops") == 1
        assert not counter(alerter, "training_node_alerts_dropped_total", channel="ops")


CONFIG_ERRORS = [
    ("dingtalk", dingtalk_reply(310000, "keywords not in content")),
    ("dingtalk", dingtalk_reply(300001)),
    ("feishu", feishu_reply(19021)),
    ("feishu", feishu_reply(19022)),
    ("feishu", feishu_reply(19024)),
    ("feishu", feishu_reply(9499, 400)),
    ("wecom", wecom_reply(93000)),
    ("slack", slack_reply(403, "invalid_token")),
    ("slack", slack_reply(404, "no_service")),
    ("receiver", (400, {}, "bad alert")),
]


@pytest.mark.parametrize(
    ("service", "error"), CONFIG_ERRORS, ids=[f"{s}-{r[2][:24]}" for s, r in CONFIG_ERRORS]
)
async def test_config_errors_are_not_retried_and_the_channel_keeps_working(
    fake, tmp_path, service, error
) -> None:
    bot = fake.add(service)
    bot.script.append(error)
    async with Running(config(tmp_path, [channel("ops", bot)])) as (alerter, bus):
        bus.publish(GpuFaultEvent("xid", 3, "GPU-3", "A100", "first", 79))
        await until(lambda: bot.seen, what="the first request")
        bus.publish(GpuFaultEvent("xid", 4, "GPU-4", "A100", "second", 79))
        await until(lambda: bot.accepted, what="the second alert")
        # had the refused one been retried, it would be among the requests and, now, accepted
        assert len(bot.seen) == 2 and len(bot.accepted) == 1
        assert "GPU 4" in message_text(bot.accepted[0])
        assert (
            counter(alerter, "training_node_alerts_dropped_total", channel="ops", reason="permanent_error")
            == 1
        )


@pytest.mark.parametrize(
    ("service", "limited"),
    [
        ("feishu", feishu_reply(9499, 429, {"x-ogw-ratelimit-reset": "1"})),
        ("slack", slack_reply(429, "rate_limited", {"Retry-After": "1"})),
    ],
)
async def test_the_services_wait_is_honoured(fake, tmp_path, service, limited) -> None:
    bot = fake.add(service)
    bot.script.append(limited)
    async with Running(config(tmp_path, [channel("ops", bot)])) as (_, bus):
        bus.publish(data_verdict())
        await until(lambda: bot.accepted, what="delivery after the 429")
    assert bot.seen[1].at - bot.seen[0].at >= 0.95  # not the 50 ms backoff


async def test_network_errors_are_retried_with_backoff(tmp_path) -> None:
    with FakeChat() as fake:
        port = fake.port
        bot = fake.add("wecom")
    # the server is gone: nothing listens on the port
    async with Running(config(tmp_path, [channel("ops", bot)])) as (alerter, bus):
        bus.publish(data_verdict())
        await until(lambda: counter(alerter, "training_node_alerts_failed_total", reason="network") >= 3)
        st = alerter.status()["channels"]["ops"]
        assert st["state"] == "retrying" and st["queued"] == 1 and "network" in st["last_error"]
        with FakeChat(port) as back:
            bot2 = back.add("wecom", token=bot.token)
            await until(lambda: bot2.accepted, what="delivery once the service is back")


# --- bursts and digests ------------------------------------------------------------------------------


@pytest.mark.parametrize("service", ["dingtalk", "wecom", "feishu"])
async def test_burst_of_100_respects_the_limit_ends_in_a_digest_and_loses_nothing(
    fake, tmp_path, service
) -> None:
    limits = {"feishu": ((2, 0.5), (6, 2.0))}.get(service, ((6, 2.0),))
    bot = fake.add(service, limits=limits)
    rates = [f"{n}/{int(w * 1000)}ms" for n, w in limits]
    async with Running(config(tmp_path, [channel("ops", bot, rate_limits=rates)])) as (alerter, bus):
        for wave in range(10):  # ten waves of ten: a sender without a limit would post 100 messages
            for i in range(wave * 10, wave * 10 + 10):
                bus.publish(CollectorFailingEvent(f"c{i:03d}", "timeout", 30.0))
            await asyncio.sleep(0.05)
        await until(lambda: represented(bot.accepted) >= 100, what="all 100 alerts represented")
        await asyncio.sleep(0.3)
        assert represented(bot.accepted) == 100  # and nothing twice
        refused = [s.answer[2] for s in bot.seen if not re.search(r'"(errcode|code)": 0\b', s.answer[2])]
        assert not refused, "the service refused requests: the limit was not respected"
        assert len(bot.accepted) >= 2  # the waves did not all fit one message
        assert counter(alerter, "training_node_alerts_digests_total", channel="ops") >= 1
        await until(lambda: counter(alerter, "training_node_alerts_sent_total", channel="ops") >= 100)
        assert counter(alerter, "training_node_alerts_sent_total", channel="ops") == 100
        assert len(bot.accepted) < 10
        # every alert is listed by name, or counted in "… and N more" where the service's size limit
        # (WeCom's 4096 bytes) leaves no room
        text = "".join(message_text(p) for p in bot.accepted)
        listed = sum(1 for i in range(100) if f"c{i:03d}" in text)
        left_out = sum(int(n) for n in re.findall(r"… and (\d+) more", text))
        assert listed + left_out == 100


async def test_a_spot_notice_jumps_the_queue(fake, tmp_path) -> None:
    bot = fake.add("slack")
    async with Running(config(tmp_path, [channel("ops", bot, rate_limits=["1/500ms"])])) as (_, bus):
        for i in range(3):
            bus.publish(CollectorFailingEvent(f"c{i}", "timeout", 30.0))
        bus.publish(spot())
        await until(lambda: represented(bot.accepted) == 4, what="four alerts")
        assert "Spot termination in" in bot.accepted[0]["text"]
        assert represented(bot.accepted[1:]) == 3


async def test_a_spot_notice_does_not_wait_out_our_backoff(fake, tmp_path) -> None:
    bot = fake.add("dingtalk")
    bot.script.append((502, {}, "<html>502 Bad Gateway</html>"))
    cfg = config(tmp_path, [channel("ops", bot)], backoff_initial="1m", backoff_max="5m")
    async with Running(cfg) as (alerter, bus):
        bus.publish(CollectorFailingEvent("nfs", "timeout", 30.0))
        await until(
            lambda: alerter.status()["channels"]["ops"]["state"] == "retrying", what="a 30-60 s backoff"
        )
        bus.publish(spot())
        await until(lambda: represented(bot.accepted) == 2, timeout=5, what="the notice, now")
        assert "Spot termination" in message_text(bot.accepted[0])


async def test_wecom_takes_chinese_cut_at_its_4096_byte_limit(fake, tmp_path) -> None:
    bot = fake.add("wecom")  # refuses more than 4096 bytes with errcode 40058
    async with Running(config(tmp_path, [channel("cn", bot, language="zh-CN")])) as (alerter, bus):
        bus.publish(GpuFaultEvent("ecc", 2, "GPU-2", "A100", "显存出现不可纠正错误，请尽快排查。" * 300))
        await until(lambda: bot.accepted, what="the cut message")
        content = bot.accepted[0]["markdown"]["content"]
        assert 4096 - 3 <= len(content.encode()) <= 4096 and content.endswith("…")
        assert content.startswith('### <font color="warning">🔴 ') and "不可纠正 ECC" in content
        assert not counter(alerter, "training_node_alerts_failed_total", channel="cn")


# --- dedup, resolve, hold, reminders ----------------------------------------------------------------


async def test_duplicates_are_counted_and_a_cleared_condition_is_resolved(fake, tmp_path) -> None:
    bot = fake.add("dingtalk")
    async with Running(config(tmp_path, [channel("ops", bot)])) as (alerter, bus):
        bus.publish(data_verdict())
        bus.publish(data_verdict())
        bus.publish(GpuFaultEvent("xid", 3, "GPU-3", "A100", xid=79))
        bus.publish(GpuFaultEvent("xid", 3, "GPU-3", "A100", xid=79))
        bus.publish(data_verdict(cleared=True))
        bus.publish(
            CollectorFailingEvent("nfs", "", 0, cleared=True)
        )  # never said failing: nothing to resolve
        await until(lambda: len(bot.accepted) == 3, what="verdict, xid, resolved")
        titles = [p["markdown"]["title"] for p in bot.accepted]
        assert "Data-bound" in titles[0] and "Xid 79" in titles[1]
        assert titles[2].startswith("✅ [RESOLVED] Data-bound (nfs-read) cleared")
        assert counter(alerter, "training_node_alerts_dropped_total", channel="ops", reason="duplicate") == 2
        assert alerter.status()["active"] == []


async def test_verdict_hold_swallows_a_blip_and_sends_what_lasts(fake, tmp_path) -> None:
    bot = fake.add("wecom")
    async with Running(config(tmp_path, [channel("ops", bot)], verdict_hold="300ms")) as (alerter, bus):
        bus.publish(data_verdict())
        bus.publish(data_verdict(cleared=True))  # came and went inside the hold
        await asyncio.sleep(0.5)
        assert not bot.seen and alerter.status()["held"] == []
        started = time.monotonic()
        bus.publish(data_verdict())
        await until(lambda: bot.accepted, what="the held verdict")
        assert time.monotonic() - started >= 0.28


async def test_active_conditions_are_reminded_every_repeat_interval(fake, tmp_path) -> None:
    bot = fake.add("feishu")
    async with Running(config(tmp_path, [channel("ops", bot)], repeat_interval="400ms")) as (_, bus):
        bus.publish(GpuFaultEvent("lost", 5, "GPU-5", "A100"))
        await until(lambda: len(bot.accepted) >= 2, what="the reminder")
        assert "Still active since" in message_text(bot.accepted[1])
        bus.publish(GpuFaultEvent("lost", 5, "GPU-5", "A100", cleared=True))
        await until(lambda: "RESOLVED" in message_text(bot.accepted[-1]), what="the resolved card")
        assert bot.accepted[-1]["card"]["header"]["template"] == "green"


async def test_filters_and_languages_per_channel(fake, tmp_path) -> None:
    crit, zh = fake.add("slack"), fake.add("dingtalk")
    cfg = config(
        tmp_path,
        [
            channel("pager", crit, severities=["critical"]),
            channel("cn", zh, language="zh-CN", events=["verdict"]),
        ],
    )
    async with Running(cfg) as (_, bus):
        bus.publish(data_verdict())  # warning: cn only
        bus.publish(spot())  # critical preemption: pager only
        await until(lambda: crit.accepted and zh.accepted, what="one message each")
        await asyncio.sleep(0.2)
        assert len(crit.accepted) == 1 and "Spot termination" in crit.accepted[0]["text"]
        assert len(zh.accepted) == 1 and "数据瓶颈" in zh.accepted[0]["markdown"]["title"]


# --- the spool ---------------------------------------------------------------------------------------


async def test_undelivered_alerts_survive_a_restart(fake, tmp_path) -> None:
    with FakeChat() as gone:
        dead = gone.add("dingtalk")
    cfg = config(tmp_path, [channel("ops", dead)], flush_timeout="200ms")
    async with Running(cfg) as (alerter, bus):
        bus.publish(data_verdict())
        bus.publish(spot())
        await until(lambda: counter(alerter, "training_node_alerts_failed_total", channel="ops"))
    live = fake.add("dingtalk")
    async with Running(config(tmp_path, [channel("ops", live)])) as (alerter, _):
        await until(lambda: represented(live.accepted) == 2, what="the spooled alerts")
        assert "Spot termination" in message_text(live.accepted[0])  # priority first, after a restart too


async def test_the_queue_is_bounded_and_every_drop_counted(tmp_path) -> None:
    cfg = config(
        tmp_path, [{"name": "ops", "type": "wecom", "url": "http://127.0.0.1:9/x?key=k"}], queue_size=10
    )
    alerter = Alerter(context(cfg))
    for i in range(15):
        alerter.handle(GpuFaultEvent("xid", i, f"GPU-{i}", "A100", xid=79))
    alerter.handle(spot())
    assert counter(alerter, "training_node_alerts_queue_depth", channel="ops") == 10
    assert counter(alerter, "training_node_alerts_dropped_total", channel="ops", reason="queue_full") == 6
    rows = alerter.spool.peek("ops", 20)
    assert rows[0].priority and "Spot" in rows[0].message.title  # the notice was kept
    await alerter.stop()


async def test_a_channel_whose_secret_cannot_be_read_is_reported_and_others_work(
    fake, tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv("NO_SUCH_SECRET_VAR", raising=False)
    good = fake.add("slack")
    cfg = config(
        tmp_path,
        [{"name": "broken", "type": "dingtalk", "url": {"env": "NO_SUCH_SECRET_VAR"}}, channel("good", good)],
    )
    async with Running(cfg) as (alerter, bus):
        bus.publish(data_verdict())
        await until(lambda: good.accepted)
        st = alerter.status()
        assert st["channels"]["broken"]["state"] == "unavailable"
        assert "NO_SUCH_SECRET_VAR is not set" in st["channels"]["broken"]["error"]
        assert (
            counter(
                alerter, "training_node_alerts_dropped_total", channel="broken", reason="channel_unavailable"
            )
            == 1
        )
        assert any("broken (dingtalk): unavailable" in line for line in st["lines"])


async def test_generic_webhook_is_signed_and_carries_digests_as_alerts(fake, tmp_path) -> None:
    bot = fake.add("receiver", secret="hook-signing-key")
    cfg = config(tmp_path, [channel("am", bot, secret="hook-signing-key", rate_limits=["1/1s"])])
    async with Running(cfg) as (_, bus):
        for i in range(5):
            bus.publish(GpuFaultEvent("thermal-throttle", i, f"GPU-{i}", "A100"))
        await until(lambda: sum(len(p["alerts"]) for p in bot.accepted) == 5, what="five alerts")
        assert max(len(p["alerts"]) for p in bot.accepted) > 1  # grouped into one notification
        labels = [a["labels"] for p in bot.accepted for a in p["alerts"]]
        assert {x["gpu"] for x in labels} == {"0", "1", "2", "3", "4"}
        assert all(x["alertname"] == "TrainingNodeGpuFault" for x in labels)
        assert json.dumps(bot.accepted).count('"status": "firing"') >= 5


async def test_a_message_that_cannot_be_formatted_is_dropped_counted_and_the_rest_flows(
    fake, tmp_path
) -> None:
    bot = fake.add("slack")
    async with Running(config(tmp_path, [channel("ops", bot)])) as (alerter, bus):
        channel_obj = alerter.deliveries["ops"].channel
        real_build = channel_obj.build

        def build(msg):
            if "GPU 6" in msg.title:
                raise RuntimeError("formatting bug")
            return real_build(msg)

        channel_obj.build = build  # type: ignore[method-assign]
        bus.publish(GpuFaultEvent("lost", 6, "GPU-6", "A100"))
        bus.publish(GpuFaultEvent("lost", 7, "GPU-7", "A100"))
        await until(lambda: bot.accepted, what="the next alert")
        assert "GPU 7" in bot.accepted[0]["text"]
        assert (
            counter(alerter, "training_node_alerts_dropped_total", channel="ops", reason="render_error") == 1
        )


async def test_a_notice_restored_after_a_restart_is_not_said_again(tmp_path) -> None:
    """Every reload and restart re-announces the active notice as ``replayed``; the rebuilt alerter
    once sent the chat alert again each time (22 alerts for one reclaim in the 30-minute soak)."""
    from dataclasses import replace

    cfg = config(
        tmp_path, [{"name": "ops", "type": "wecom", "url": "http://127.0.0.1:9/x?key=k"}], queue_size=10
    )
    alerter = Alerter(context(cfg))
    alerter.handle(replace(spot(), replayed=True))
    assert alerter.spool.peek("ops", 20) == []
    alerter.handle(spot())
    assert len(alerter.spool.peek("ops", 20)) == 1
    await alerter.stop()
