"""Bad input from the metadata service, every case from the issue, against the simulator: the watcher
keeps going, says what happened (status, counters, warnings) and recovers by itself."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from conftest import free_port
from preemption_helpers import harness  # noqa: F401

from agent.devtools.simulator import start_simulator
from agent.preemption.clouds import alibaba, aws, azure, tencent


def _last_error(h, source: str = "spot") -> str:
    return h.watcher.status()["sources"].get(source, {}).get("last_error") or ""


def _failed_reads(h, path: str) -> list[float]:
    """When the simulator answered ``path`` with an injected fault."""
    return [e["monotonic"] for e in h.sim.state.log if e["fault"] and e["path"] == path]


async def test_5xx_counted_backed_off_and_recovered(harness):  # noqa: F811
    h = await harness("alibaba")
    h.sim.state.add_fault({"kind": "status", "status": 500, "path": alibaba.SPOT_PATH})
    h.sim.state.add_notice("spot-termination", 300)
    await h.wait(lambda: h.watcher.sources.get("spot") and h.watcher.sources["spot"].errors >= 3)
    status = h.watcher.status()
    assert "server_error" in _last_error(h) and "HTTP 500" in _last_error(h)
    assert any("FAILING" in line for line in status["lines"])
    assert not h.notices(), "an error is neither presence nor absence"
    # backoff: far fewer reads than one per 100 ms poll. Counted reads, their spacing measured: a slow
    # box only spaces them more, and never has this test look at fewer reads
    seen = len(_failed_reads(h, alibaba.SPOT_PATH))
    await h.wait(lambda: len(_failed_reads(h, alibaba.SPOT_PATH)) >= seen + 3, what="3 more failed reads")
    spaced = _failed_reads(h, alibaba.SPOT_PATH)[seen - 1 :]
    mean_gap = (spaced[-1] - spaced[0]) / (len(spaced) - 1)
    assert mean_gap >= 1.5 * 0.1, f"{mean_gap:.3f}s between failed reads at a 100 ms poll interval"
    h.sim.state.faults.clear()
    await h.wait_notice(kind="spot-termination")
    assert h.watcher.sources["spot"].errors == 0 and h.outcomes()["server_error"] >= 3


async def test_gcp_503_during_maintenance_is_retried(harness):  # noqa: F811
    h = await harness("gcp")
    await h.wait(lambda: len(h.sim.state.log) >= 2)
    h.sim.state.add_fault({"kind": "status", "status": 503, "count": 3})
    h.sim.state.add_maintenance("migrate")
    await h.wait_notice(kind="maintenance-migrate", timeout=6)
    # the held long-poll may bring the change before the 503s land on the reads after it: wait for
    # all three, then for every source reading again, and the notice still there
    await h.wait(
        lambda: (
            h.outcomes().get("server_error", 0) >= 3
            and all(st.errors == 0 for st in h.watcher.sources.values())
        ),
        what="the three 503s retried past",
    )
    assert not h.notices(withdrawn=True)


async def test_timeouts(harness):  # noqa: F811
    h = await harness("tencent", timeout="300ms")
    h.sim.state.add_fault({"kind": "slow", "delay": 1.0, "path": tencent.SPOT_PATH})
    h.sim.state.add_notice("spot-termination", 300)
    await h.wait(lambda: h.outcomes().get("timeout", 0) >= 2, what="timeouts")
    assert "no answer within 0.3 s" in _last_error(h)
    h.sim.state.faults.clear()
    await h.wait_notice(kind="spot-termination")


async def test_connection_refused_then_service_comes_back(harness):  # noqa: F811
    port = free_port()
    h = await harness("aws", simulate=False, endpoint=f"http://127.0.0.1:{port}")
    await h.wait(lambda: h.outcomes().get("connection_error", 0) >= 3, what="refused connections")
    assert "cannot connect to 127.0.0.1" in _last_error(h)
    assert not any(t.done() for t in h._tasks), "the watcher keeps running"
    sim = await start_simulator("aws", port=port)
    try:
        sim.state.add_notice("spot-termination", 120)
        await h.wait_notice(kind="spot-termination", timeout=10)  # backoff_max 300 ms in tests
        assert h.watcher.sources["spot"].errors == 0
    finally:
        await sim.close()


async def test_token_endpoint_failure_without_fallback(harness):  # noqa: F811
    h = await harness("alibaba")
    h.sim.state.add_fault({"kind": "status", "status": 500, "path": alibaba.TOKEN.path})
    h.sim.state.add_notice("spot-termination", 300)
    await h.wait(lambda: h.outcomes().get("token_error", 0) >= 2, what="token errors")
    assert not h.notices()
    assert not [e for e in h.sim.state.log if e["method"] == "GET"], "no tokenless read unless allowed"
    assert "token endpoint failed" in h.watcher.status()["token"]
    h.sim.state.faults.clear()
    await h.wait_notice(kind="spot-termination")


async def test_token_endpoint_failure_with_fallback(harness):  # noqa: F811
    h = await harness("aws", allow_tokenless_fallback=True)
    h.sim.state.add_fault({"kind": "status", "status": 404, "path": aws.TOKEN.path})  # an IMDSv1-only service
    h.sim.state.add_notice("spot-termination", 300)
    await h.wait_notice(kind="spot-termination")
    assert "tokenless fallback" in h.watcher.status()["token"]
    assert not any(e["token"] for e in h.sim.state.log if e["method"] == "GET")


async def test_fallback_cannot_bypass_a_service_that_requires_tokens(harness):  # noqa: F811
    h = await harness("alibaba", require_token=True, allow_tokenless_fallback=True)
    h.sim.state.add_fault({"kind": "garbage", "path": alibaba.TOKEN.path})  # unusable token body
    h.sim.state.add_notice("spot-termination", 300)
    # the counter counts a 403 as the client sees it, a moment before the source records its error
    await h.wait(
        lambda: h.outcomes().get("unauthorized", 0) >= 2 and "HTTP 403" in _last_error(h), what="403s"
    )
    assert not h.notices()


async def test_401_after_token_expiry_fetches_a_new_token(harness):  # noqa: F811
    h = await harness("aws", require_token=True, token_ttl="6h")
    await h.wait(lambda: h.watcher.sources.get("spot") and h.watcher.sources["spot"].reads >= 2)
    assert h.watcher.client.token_fetches == 1
    h.sim.state.expire_tokens()
    h.sim.state.add_notice("spot-termination", 120)
    await h.wait_notice(kind="spot-termination")
    assert h.outcomes().get("unauthorized", 0) >= 1 and h.watcher.client.token_fetches >= 2
    assert not h.watcher.sources["spot"].errors, "a 401 is answered by a new token, not by an error"


async def test_empty_huge_and_garbage_bodies(harness):  # noqa: F811
    h = await harness("alibaba", max_body_bytes=65536)
    cases = [
        ({"kind": "empty"}, "empty termination-time body"),
        ({"kind": "huge", "bytes": 4_000_000}, "exceeds the 65536 byte limit"),
        ({"kind": "garbage"}, "termination-time is not a time"),
    ]
    for fault, said in cases:
        h.sim.state.faults.clear()
        h.sim.state.add_fault({**fault, "path": alibaba.SPOT_PATH})
        await h.wait(lambda: said in _last_error(h), what=f"{fault} rejected")  # noqa: B023
        assert _last_error(h).startswith("bad_body")
    assert h.outcomes()["bad_body"] >= 3
    assert not h.notices(), "garbage is never a notice"
    h.sim.state.faults.clear()
    h.sim.state.add_notice("spot-termination", 300)
    await h.wait_notice(kind="spot-termination")


async def test_huge_body_is_cut_off_not_buffered(harness):  # noqa: F811
    h = await harness("aws", max_body_bytes=65536)
    h.sim.state.add_fault({"kind": "huge", "bytes": 50_000_000, "path": aws.SCHEDULED_PATH})
    await h.wait(
        lambda: "byte limit" in (h.watcher.status()["sources"].get("maintenance", {}).get("last_error") or "")
    )


async def test_garbage_during_a_notice_does_not_withdraw_it(harness):  # noqa: F811
    h = await harness("alibaba", withdraw_after_polls=2)
    h.sim.state.add_notice("spot-termination", 300)
    await h.wait_notice(kind="spot-termination")
    h.sim.state.add_fault({"kind": "garbage", "path": alibaba.SPOT_PATH})
    await h.wait(lambda: h.outcomes().get("bad_body", 0) >= 5)
    assert not h.notices(withdrawn=True) and len(h.watcher.tracker.active) == 1


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_times_in_the_past_or_absurdly_far(harness):  # noqa: F811
    h = await harness("alibaba")
    now = datetime.now(UTC)
    cases = {
        "late": (_iso(now - timedelta(seconds=60)), True),  # a late notice: deadline kept, negative
        "long past": (_iso(now - timedelta(days=400)), False),
        "absurd": ("2999-01-01T00:00:00Z", False),
    }
    for name, (body, keeps_deadline) in cases.items():
        h.events.clear()
        h.sim.state.set_override({"path": alibaba.SPOT_PATH, "body": body})
        ev = await h.wait_notice(kind="spot-termination", withdrawn=False)
        if keeps_deadline:
            assert -70 < ev.seconds_remaining < -50, name
        else:
            assert ev.deadline is None, name  # unknown deadline: act now
            assert any("implausible deadline" in w["text"] for w in h.watcher.status()["warnings"]), name
        h.sim.state.set_override({"path": alibaba.SPOT_PATH, "remove": True})
        await h.wait_notice(event_id=ev.event_id, withdrawn=True)


async def test_wrong_timezone_formats(harness):  # noqa: F811
    ali = await harness("alibaba")
    soon = datetime.now(UTC) + timedelta(seconds=200)
    # no zone where Alibaba documents UTC with Z: read as UTC, and said so
    ali.sim.state.set_override({"path": alibaba.SPOT_PATH, "body": soon.strftime("%Y-%m-%d %H:%M:%S")})
    ev = await ali.wait_notice(kind="spot-termination")
    assert 190 < ev.seconds_remaining <= 200
    assert any("read as UTC" in w["text"] for w in ali.watcher.status()["warnings"])
    # Tencent with an explicit Z is not shifted by 8 hours
    ten = await harness("tencent")
    ten.sim.state.set_override({"path": tencent.SPOT_PATH, "body": _iso(soon)})
    ev = await ten.wait_notice(kind="spot-termination")
    assert 190 < ev.seconds_remaining <= 200
    # Azure NotBefore in a zone the format does not allow: the event stays, its deadline is unknown
    az = await harness("azure")
    az.sim.state.add_maintenance("reboot", 3600, time_text="Mon, 19 Sep 2016 18:29:47 CET")
    ev = await az.wait_notice(kind="maintenance-reboot")
    assert ev.deadline is None
    assert any("RFC 1123" in w["text"] for w in az.watcher.status()["warnings"])
    # AWS NotBefore as RFC 3339 instead of "21 Jan 2019 09:00:43 GMT": unambiguous, accepted
    aw = await harness("aws")
    aw.sim.state.add_maintenance("stop", 3600, time_text=_iso(soon))
    ev = await aw.wait_notice(kind="maintenance-stop")
    assert 190 < ev.seconds_remaining <= 200


async def test_flapping_present_absent_present(harness):  # noqa: F811
    # 4 absent polls withdraw: a loaded box may read one state two or three times, never 4 in a row,
    # while the 6 absent reads in all would withdraw it were presence not to start the count again
    h = await harness("tencent", withdraw_after_polls=4)
    n = h.sim.state.add_notice("spot-termination", 300)
    body = n.deadline.astimezone(tencent.BEIJING).strftime("%Y-%m-%d %H:%M:%S")
    await h.wait_notice(kind="spot-termination")

    async def read_as(status: int) -> None:
        """Until the watcher has read the spot path as ``status`` since now."""
        mark = h.sim.state.requests
        await h.wait(
            lambda: any(
                e["seq"] > mark and e["path"] == tencent.SPOT_PATH and e["status"] == status
                for e in h.sim.state.log
            ),
            what=f"a read answered {status}",
        )

    for _ in range(6):  # one poll absent, one present ...
        h.sim.state.set_override({"path": tencent.SPOT_PATH, "status": 404, "body": "not found"})
        await read_as(404)
        h.sim.state.set_override({"path": tencent.SPOT_PATH, "body": body})
        await read_as(200)
    assert len(h.notices()) == 1 and not h.notices(withdrawn=True)


async def test_azure_unexpected_shapes(harness):  # noqa: F811
    h = await harness("azure")
    h.sim.state.set_override(
        {"path": azure.EVENTS_PATH, "body": '{"DocumentIncarnation": 2, "Events": "none"}'}
    )
    await h.wait(lambda: "no Events list" in _last_error(h, "scheduledevents"))
    h.sim.state.set_override({"path": azure.EVENTS_PATH, "body": "<html>maintenance</html>"})
    await h.wait(lambda: "not JSON" in _last_error(h, "scheduledevents"))
    h.sim.state.set_override({"path": azure.EVENTS_PATH, "remove": True})
    h.sim.state.add_notice("spot-termination", 30)
    await h.wait_notice(kind="spot-termination")
