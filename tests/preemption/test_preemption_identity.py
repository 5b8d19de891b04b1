"""One reclaim, one notice: a notice's id is what the cloud means by one event, however its time moves.

The simulator serves the time recomputed on every read (amazon-ec2-metadata-mock's default spot
mode: request time + 2 minutes) and restarts with an earlier time; the watcher announces one
notice, once, and the earlier deadline again under the same id, never a new one.
"""

from __future__ import annotations

import random

import pytest
from preemption_helpers import harness  # noqa: F401

from agent.core.events import PreemptionEvent

NOTICES = [
    ("alibaba", "spot-termination"),
    ("aws", "spot-termination"),
    ("aws", "spot-stop"),
    ("aws", "rebalance-recommendation"),
    ("gcp", "spot-termination"),
    ("azure", "spot-termination"),
    ("tencent", "spot-termination"),
]
HAS_DEADLINE = {"alibaba", "aws", "azure", "tencent"}


def _plain(provider: str) -> dict[str, bool]:
    # GCE's long-poll answers on a change only: plain reads at poll_interval, to count them
    return {"gcp_long_poll": False} if provider == "gcp" else {}


def _reads(h, source: str) -> int:
    st = h.watcher.sources.get(source)
    return st.reads if st else 0


def _source(provider: str, kind: str) -> str:
    if provider == "gcp":
        return "preempted"
    if provider == "azure":
        return "scheduledevents"
    return "rebalance" if kind == "rebalance-recommendation" else "spot"


@pytest.mark.parametrize(("provider", "kind"), NOTICES)
async def test_time_recomputed_on_every_read_is_one_notice(harness, provider, kind):  # noqa: F811
    h = await harness(provider, withdraw_after_polls=2, **_plain(provider))
    await h.wait(lambda: h.identity(), what="identity")  # the instance id goes into minted ids
    seconds = random.Random(f"{provider}{kind}").uniform(100, 140)
    h.sim.state.add_notice(kind, seconds, moving=True)
    first = await h.wait_notice(kind=kind)
    source = _source(provider, kind)
    reads = _reads(h, source)
    await h.wait(lambda: _reads(h, source) >= reads + 15, what="15 more reads")
    announced = h.notices(kind=kind)
    assert [e.event_id for e in announced] == [first.event_id], "a new notice for a moved time"
    assert not h.notices(withdrawn=True)
    if provider in ("alibaba", "aws", "tencent", "gcp"):  # the cloud gives no id: instance and kind
        assert h.identity().instance_id in first.event_id and kind in first.event_id
    # the deadline moved later on every read; the notice stays, with the cloud's latest word
    [active] = h.watcher.status()["active"]
    assert active["event_id"] == first.event_id
    if provider in HAS_DEADLINE and kind != "rebalance-recommendation":
        assert active["deadline"] > first.deadline.isoformat()


@pytest.mark.parametrize(("provider", "kind"), NOTICES)
async def test_service_restart_with_an_earlier_time_is_the_same_notice(harness, provider, kind):  # noqa: F811
    h = await harness(provider, withdraw_after_polls=2, **_plain(provider))
    h.sim.state.add_notice(kind, 300)
    first = await h.wait_notice(kind=kind)
    await h.sim.restart(down=0.5, shift=-120)  # connections refused for 0.5 s, then 2 min earlier
    source = _source(provider, kind)
    reads = _reads(h, source)
    await h.wait(lambda: _reads(h, source) >= reads + 10, what="reads after the restart")
    announced = h.notices(kind=kind)
    assert {e.event_id for e in announced} == {first.event_id}
    assert not h.notices(withdrawn=True), "withdrawn and announced anew"
    if provider in HAS_DEADLINE and kind != "rebalance-recommendation":
        # said again, under the same id, with the earlier deadline: the checkpoint must hear it
        assert len(announced) == 2
        moved = (first.deadline - announced[1].deadline).total_seconds()
        assert 115 <= moved <= 125, moved
    else:
        assert len(announced) == 1  # nothing moved that the notice carries


async def test_a_restart_of_the_agent_keeps_the_minted_id(harness):  # noqa: F811
    h = await harness("aws")
    h.sim.state.add_notice("spot-termination", 120, moving=True)
    first = await h.wait_notice(kind="spot-termination")
    await h.restart()
    replayed = await h.wait_notice(kind="spot-termination")
    reads = _reads(h, "spot")
    await h.wait(lambda: _reads(h, "spot") >= reads + 10, what="reads after the restart")
    assert replayed.replayed and replayed.event_id == first.event_id
    assert [e.event_id for e in h.notices()] == [first.event_id]


async def test_each_occurrence_of_a_stop_notice_gets_its_own_id(harness):  # noqa: F811
    h = await harness("aws", withdraw_after_polls=2)
    n = h.sim.state.add_notice("spot-stop", 120, moving=True)
    first = await h.wait_notice(kind="spot-stop")
    h.sim.state.cancel(n.id)
    await h.wait_notice(kind="spot-stop", withdrawn=True)
    # minted ids carry the second the occurrence was first seen, and a count within the same second
    h.sim.state.add_notice("spot-stop", 120, moving=True)
    await h.wait(lambda: len(h.notices(kind="spot-stop", withdrawn=False)) == 2, what="the second reclaim")
    second = h.notices(kind="spot-stop", withdrawn=False)[1]
    assert isinstance(second, PreemptionEvent) and second.event_id != first.event_id
