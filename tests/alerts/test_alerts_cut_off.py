"""Alerts whose delivery was cut off: by a stop (reload, shutdown) while the request is out, and by a
kill -9 before the answer came. Every alert is delivered once or counted, never shown twice on a
chat service. Found by the fault soak (bench/soak.py): two alerts arrived twice after a kill -9."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from aiohttp import web
from alerts_support import Running, config, counter, represented, until
from fake_chat import FakeChat
from test_alerts_delivery import channel, data_verdict, spot

from agent.alerts.alerter import SPOOL_FILE


async def test_a_kill_during_a_send_counts_the_chat_alert_and_resends_the_idempotent_one(tmp_path) -> None:
    with FakeChat() as gone:
        dead = [gone.add("dingtalk"), gone.add("receiver")]
    cfg = config(tmp_path, [channel("ding", dead[0]), channel("hook", dead[1])], flush_timeout="200ms")
    async with Running(cfg) as (alerter, bus):
        bus.publish(data_verdict())
        bus.publish(spot())
        await until(lambda: counter(alerter, "training_node_alerts_failed_total", channel="ding"))
        await until(lambda: counter(alerter, "training_node_alerts_failed_total", channel="hook"))
    # what a kill -9 leaves while the requests are out: the rows marked in flight
    db = sqlite3.connect(tmp_path / "state" / SPOOL_FILE)
    with db:
        db.execute("UPDATE queue SET inflight = 1")
    db.close()
    with FakeChat() as live:
        ding, hook = live.add("dingtalk"), live.add("receiver")
        cfg = config(tmp_path, [channel("ding", ding), channel("hook", hook)])
        async with Running(cfg) as (alerter, bus):
            # the Alertmanager-format receiver drops a repeat: both are sent again
            await until(lambda: represented(hook.accepted) == 2, what="the receiver's alerts again")
            # DingTalk would show them twice: counted, not sent
            assert (
                counter(
                    alerter, "training_node_alerts_dropped_total", channel="ding", reason="outcome_unknown"
                )
                == 2
            )
            assert alerter.spool.depth("ding") == 0
            bus.publish(data_verdict())  # the channel works on: a new alert goes out
            await until(lambda: represented(ding.accepted) == 1, what="a new alert on DingTalk")


@pytest.mark.parametrize("abandoned", [False, True])
async def test_a_stop_while_a_request_is_out_waits_for_its_answer(tmp_path, abandoned) -> None:
    """``abandoned``: the daemon's supervisor cancels the component's run task and gives up on it
    after its short timeout, while the request is still out; then the component's stop() flushes."""
    got: list[bytes] = []
    arrived = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        got.append(await request.read())
        arrived.set()
        await asyncio.sleep(1.0)  # the answer comes after the stop began
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://127.0.0.1:{port}/hook"
    hook = {"name": "hook", "type": "webhook", "url": url, "rate_limits": ["50/1s"], "timeout": "10s"}
    try:
        running = Running(config(tmp_path, [hook], flush_timeout="3s"))
        async with running as (alerter, bus):
            bus.publish(spot())
            await asyncio.wait_for(arrived.wait(), 30)
            if abandoned:
                assert running._task is not None
                running._task.cancel()
                await asyncio.wait([running._task], timeout=0.3)
        # the stop waited for the answer: the row is gone, not left to be sent again
        async with Running(config(tmp_path, [hook], flush_timeout="200ms")) as (alerter, _):
            assert alerter.spool.depth("hook") == 0
            await asyncio.sleep(0.5)
        assert len(got) == 1
    finally:
        await runner.cleanup()
