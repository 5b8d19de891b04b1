"""The metadata simulator speaks each cloud's protocol: paths, required headers, tokens, status codes,
body formats, GCP's long-poll, Azure's StartRequests; and its control API and CLI work."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime

import aiohttp
import pytest
from conftest import async_wait_until, wait_until
from preemption_helpers import REPO, sim_process  # noqa: F401

from agent.devtools.simulator import start_simulator
from agent.preemption.clouds import alibaba, aws, azure, gcp, tencent


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as s:
        yield s


async def get(s: aiohttp.ClientSession, url: str, method: str = "GET", **kw) -> tuple[int, str, dict]:
    async with s.request(method, url, **kw) as r:
        return r.status, await r.text(), r.headers.copy()


@pytest.mark.parametrize(
    ("provider", "scheme", "missing_status"), [("alibaba", alibaba.TOKEN, 403), ("aws", aws.TOKEN, 401)]
)
async def test_session_tokens(http, provider, scheme, missing_status):
    sim = await start_simulator(provider, require_token=True)
    try:
        spot = alibaba.SPOT_PATH if provider == "alibaba" else aws.ACTION_PATH
        status, _, _ = await get(http, sim.url + spot)
        assert status == missing_status  # hardened / IMDSv2-only: no token, no answer
        for bad in ("0", "21601", "x", None):
            headers = {scheme.ttl_header: bad} if bad else {}
            status, _, _ = await get(http, sim.url + scheme.path, "PUT", headers=headers)
            assert status == 400, bad
        assert (await get(http, sim.url + scheme.path))[0] == 405
        status, _, _ = await get(
            http,
            sim.url + scheme.path,
            "PUT",
            headers={scheme.ttl_header: "60", "X-Forwarded-For": "10.0.0.1"},
        )
        assert status == 403
        status, token, headers = await get(
            http, sim.url + scheme.path, "PUT", headers={scheme.ttl_header: "60"}
        )
        assert status == 200 and len(token) >= 32 and headers[scheme.ttl_header] == "60"
        status, _, _ = await get(http, sim.url + spot, headers={scheme.token_header: token})
        assert status == 404  # nothing scheduled
        sim.state.add_notice("spot-termination", 120)
        status, body, _ = await get(http, sim.url + spot, headers={scheme.token_header: token})
        assert status == 200 and "T" in body
        assert (await get(http, sim.url + spot, headers={scheme.token_header: "forged"}))[0] == 401
        sim.state.expire_tokens()
        assert (await get(http, sim.url + spot, headers={scheme.token_header: token}))[0] == 401
    finally:
        await sim.close()


async def test_tokens_optional_without_require_token(http):
    sim = await start_simulator("aws")
    try:
        assert (await get(http, sim.url + aws.ACTION_PATH))[0] == 404
        # an invalid token is refused even when tokens are optional, as IMDS does
        assert (await get(http, sim.url + aws.ACTION_PATH, headers={aws.TOKEN.token_header: "x"}))[0] == 401
    finally:
        await sim.close()


async def test_alibaba_and_tencent_bodies(http):
    ali = await start_simulator("alibaba")
    ten = await start_simulator("tencent")
    try:
        n = ali.state.add_notice("spot-termination", 300)
        status, body, _ = await get(http, ali.url + alibaba.SPOT_PATH)
        assert status == 200 and body == n.deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert (await get(http, ali.url + alibaba.EVENTS_PATH))[0] == 404
        m = ali.state.add_maintenance("redeploy", 86400)
        status, body, _ = await get(http, ali.url + alibaba.EVENTS_PATH)
        [item] = json.loads(body)
        assert item["EventId"] == m.id and item["EventType"]["Name"] == "SystemMaintenance.Redeploy"
        assert (await get(http, ali.url + "/latest/meta-data/instance-id"))[1].startswith("i-")
        t = ten.state.add_notice("spot-termination", 300)
        status, body, _ = await get(http, ten.url + tencent.SPOT_PATH)
        beijing = t.deadline.astimezone(tencent.BEIJING).strftime("%Y-%m-%d %H:%M:%S")
        assert status == 200 and body == beijing and "T" not in body and "Z" not in body
    finally:
        await ali.close()
        await ten.close()


async def test_aws_bodies(http):
    sim = await start_simulator("aws")
    try:
        sim.state.add_notice("spot-stop", 120)
        sim.state.add_notice("rebalance-recommendation")
        assert json.loads((await get(http, sim.url + aws.ACTION_PATH))[1])["action"] == "stop"
        assert "noticeTime" in json.loads((await get(http, sim.url + aws.REBALANCE_PATH))[1])
        assert json.loads((await get(http, sim.url + aws.SCHEDULED_PATH))[1]) == []
        m = sim.state.add_maintenance("reboot", 86400)
        sim.state.cancel(m.id)
        [item] = json.loads((await get(http, sim.url + aws.SCHEDULED_PATH))[1])
        assert item["State"] == "canceled" and item["Code"] == "system-reboot"
        assert item["Description"].startswith("[Canceled]")
        assert aws.parse_aws_time(item["NotBefore"])  # the "21 Jan 2019 09:00:43 GMT" format
        doc = json.loads((await get(http, sim.url + aws.IDENTITY_PATH))[1])
        assert doc["instanceId"].startswith("i-") and doc["region"] == "us-east-1"
    finally:
        await sim.close()


async def test_gcp_headers_and_long_poll(http):
    sim = await start_simulator("gcp")
    flavor = {"Metadata-Flavor": "Google"}
    try:
        assert (await get(http, sim.url + gcp.PREEMPTED_PATH))[0] == 403
        status, body, headers = await get(http, sim.url + gcp.PREEMPTED_PATH, headers=flavor)
        assert status == 200 and body == "FALSE" and headers["Metadata-Flavor"] == "Google"
        etag = headers["ETag"]

        async def later():
            await asyncio.sleep(0.3)
            sim.state.add_notice("spot-termination", 30)

        params = {"wait_for_change": "true", "timeout_sec": "10", "last_etag": etag}
        started = time.monotonic()
        task = asyncio.create_task(later())
        status, body, headers = await get(http, sim.url + gcp.PREEMPTED_PATH, headers=flavor, params=params)
        took = time.monotonic() - started
        await task
        assert body == "TRUE" and headers["ETag"] != etag and 0.25 < took < 5
        # nothing changes: the long-poll ends at timeout_sec with the same value and ETag
        params = {"wait_for_change": "true", "timeout_sec": "1", "last_etag": headers["ETag"]}
        started = time.monotonic()
        status, body2, headers2 = await get(http, sim.url + gcp.PREEMPTED_PATH, headers=flavor, params=params)
        assert (
            body2 == "TRUE" and headers2["ETag"] == headers["ETag"] and 0.9 < time.monotonic() - started < 5
        )
        # a stale ETag returns at once
        params = {"wait_for_change": "true", "timeout_sec": "10", "last_etag": "stale"}
        started = time.monotonic()
        assert (await get(http, sim.url + gcp.PREEMPTED_PATH, headers=flavor, params=params))[1] == "TRUE"
        assert time.monotonic() - started < 1
        sim.state.add_maintenance("terminate")
        assert (await get(http, sim.url + gcp.MAINTENANCE_PATH, headers=flavor))[
            1
        ] == "TERMINATE_ON_HOST_MAINTENANCE"
    finally:
        await sim.close()


async def test_azure_headers_events_and_start_requests(http):
    sim = await start_simulator("azure")
    url = sim.url + azure.EVENTS_PATH
    try:
        assert (await get(http, url, params={"api-version": "2020-07-01"}))[0] == 400  # no Metadata header
        assert (await get(http, url, headers={"Metadata": "true"}))[0] == 400  # no api-version
        ok = {"headers": {"Metadata": "true"}, "params": {"api-version": "2020-07-01"}}
        doc = json.loads((await get(http, url, **ok))[1])
        assert doc["Events"] == [] and isinstance(doc["DocumentIncarnation"], int)
        n = sim.state.add_notice("spot-termination", 30)
        [event] = json.loads((await get(http, url, **ok))[1])["Events"]
        assert event["EventType"] == "Preempt" and event["EventStatus"] == "Scheduled"
        assert event["Resources"] == ["sim-gpu-node-0"] and event["EventSource"] == "Platform"
        assert azure.parse_rfc1123(event["NotBefore"]) == n.deadline.replace(microsecond=0)
        assert {"EventId", "ResourceType", "Description", "DurationInSeconds"} <= set(event)
        status, _, _ = await get(http, url, "POST", json={"StartRequests": [{"EventId": "nope"}]}, **ok)
        assert status == 400
        status, _, _ = await get(http, url, "POST", json={"StartRequests": [{"EventId": n.id}]}, **ok)
        assert status == 200
        [event] = json.loads((await get(http, url, **ok))[1])["Events"]
        assert event["EventStatus"] == "Started" and event["NotBefore"] == ""
        assert sim.state.acks[0]["event_id"] == n.id
    finally:
        await sim.close()


async def test_control_api_faults_and_overrides(http):
    sim = await start_simulator("alibaba")
    ctl = sim.url + "/_sim"
    spot = sim.url + alibaba.SPOT_PATH
    try:
        status, body, _ = await get(http, ctl + "/notice", "POST", json={"seconds": 120, "after": 0.3})
        pending = json.loads(body)
        assert status == 200 and pending["state"] == "pending" and pending["announced_monotonic"] is None
        assert (await get(http, spot))[0] == 404
        await async_wait_until(lambda: sim.state.events[0].announced_monotonic, what="the announcement")
        state = json.loads((await get(http, ctl + "/state"))[1])
        [ev] = state["events"]
        assert ev["state"] == "active" and ev["announced_monotonic"] <= time.monotonic()
        assert ev["announced_wall"] >= pending["announce_at_wall"] - 0.05, "announced before its time"
        assert ev["announced_wall"] == pytest.approx(time.time(), abs=5)
        assert (await get(http, spot))[0] == 200

        await get(http, ctl + "/fault", "POST", json={"kind": "status", "status": 503, "count": 2})
        assert [(await get(http, spot))[0] for _ in range(3)] == [503, 503, 200]
        await get(http, ctl + "/fault", "POST", json={"kind": "garbage", "count": 1})
        async with http.get(spot) as r:
            assert r.status == 200 and b"\x00" in await r.read()
        await get(http, ctl + "/fault", "POST", json={"kind": "empty", "count": 1})
        assert (await get(http, spot))[1] == ""
        await get(http, ctl + "/fault", "POST", json={"kind": "huge", "bytes": 3_000_000, "count": 1})
        async with http.get(spot) as r:
            assert len(await r.read()) >= 3_000_000
        await get(http, ctl + "/fault", "POST", json={"kind": "slow", "delay": 0.4, "count": 1})
        started = time.monotonic()
        assert (await get(http, spot))[0] == 200 and time.monotonic() - started >= 0.35
        # aiohttp retries once on a reused connection that drops: drop two in a row
        await get(http, ctl + "/fault", "POST", json={"kind": "drop", "count": 2})
        with pytest.raises(aiohttp.ClientError):
            await get(http, spot)
        await get(
            http, ctl + "/override", "POST", json={"path": alibaba.SPOT_PATH, "body": "2015-01-05 18:02:00"}
        )
        assert (await get(http, spot))[1] == "2015-01-05 18:02:00"

        log = json.loads((await get(http, ctl + "/requests", params={"since": "0"}))[1])
        assert [e["fault"] for e in log if e["fault"]] == [
            "status",
            "status",
            "garbage",
            "empty",
            "huge",
            "slow",
            "drop",
            "drop",
        ]
        assert json.loads((await get(http, ctl + "/cancel", "POST", json={}))[1])["ended"] == [ev["id"]]

        for bad in ({"kind": "nope"}, {"seconds": "soon"}):
            assert (await get(http, ctl + "/notice", "POST", json=bad))[0] == 400
        assert (await get(http, ctl + "/fault", "POST", json={"kind": "meteor"}))[0] == 400
        assert (await get(http, ctl + "/notice", "POST", data=b"{not json"))[0] == 400
        assert (await get(http, ctl + "/maintenance", "POST", json={"kind": "migrate"}))[0] == 400
        assert (await get(http, ctl + "/cancel", "POST", json={"id": "missing"}))[0] == 400
    finally:
        await sim.close()


def test_cli_simulator_announces_on_schedule(sim_process):  # noqa: F811
    sim = sim_process(
        "aws",
        "--notice-after",
        "0.3s",
        "--notice-seconds",
        "120",
        "--notice-kind",
        "spot-stop",
        "--maintenance",
        "retirement:2h",
        "--require-token",
    )
    wait_until(
        lambda: all(e["state"] == "active" for e in sim.read_state()["events"]),
        timeout=10,
        what="both events announced",
        detail=sim.log,
    )
    by_kind = {e["kind"]: e for e in sim.read_state()["events"]}
    assert by_kind["spot-stop"]["state"] == "active" and by_kind["retirement"]["state"] == "active"
    spot = by_kind["spot-stop"]
    ahead = datetime.fromisoformat(spot["deadline"]).timestamp() - spot["announced_wall"]
    assert ahead == pytest.approx(120, abs=1)
    assert "announced spot-stop" in sim.log()
    assert sim.read_state()["require_token"] is True
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.proc.wait(5) == 0


def test_cli_refuses_non_loopback_listen_and_bad_kinds():
    run = [sys.executable, "-m", "agent", "metadata-sim"]
    out = subprocess.run(
        [*run, "--provider", "alibaba", "--listen", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=20,
    )
    assert out.returncode == 2 and "loopback only" in out.stderr
    out = subprocess.run(
        [*run, "--provider", "tencent", "--listen", "127.0.0.1:0", "--maintenance", "reboot"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=20,
    )
    assert out.returncode == 2 and "no maintenance" in out.stderr
    out = subprocess.run([*run, "--provider", "nimbus"], capture_output=True, text=True, cwd=REPO, timeout=20)
    assert out.returncode == 2 and "invalid choice" in out.stderr


def test_now_is_utc():
    # the simulator's times are aware UTC (a naive datetime here would shift every deadline)
    from agent.devtools.simulator import SimState

    async def make():
        s = SimState("alibaba")
        return s.add_notice("spot-termination", 60).deadline

    deadline = asyncio.run(make())
    assert deadline.tzinfo is not None and abs((deadline - datetime.now(UTC)).total_seconds() - 60) < 5
