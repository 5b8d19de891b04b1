"""De-duplication across polls (NoticeTracker) and across restarts (NoticeStore)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from agent.core.events import PreemptionEvent
from agent.preemption.notices import NoticeStore, NoticeTracker, event_to_json

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def ev(event_id="a", kind="spot-termination", deadline_s=300.0, at_s=0.0, withdrawn=False) -> PreemptionEvent:
    at = T0 + timedelta(seconds=at_s)
    return PreemptionEvent(
        provider="alibaba",
        kind=kind,
        event_id=event_id,
        deadline=T0 + timedelta(seconds=deadline_s) if deadline_s is not None else None,
        received_at=at,
        raw="x",
        withdrawn=withdrawn,
    )


def test_same_notice_every_poll_is_announced_once():
    t = NoticeTracker(withdraw_after=3)
    assert t.observe("spot", [ev()]) == [ev()]
    for i in range(1, 20):
        assert t.observe("spot", [ev(at_s=i)]) == []
    assert list(t.active) == ["a"]


def test_absence_withdraws_after_consecutive_reads_only():
    t = NoticeTracker(withdraw_after=3)
    t.observe("spot", [ev()])
    assert t.observe("spot", []) == []
    assert t.observe("spot", []) == []
    out = t.observe("spot", [])
    assert len(out) == 1 and out[0].withdrawn and out[0].event_id == "a" and not t.active


def test_flapping_present_absent_present_is_one_notice():
    t = NoticeTracker(withdraw_after=3)
    announced = []
    for present in (1, 0, 1, 0, 0, 1, 1, 0, 1):
        announced += t.observe("spot", [ev()] if present else [])
    assert announced == [ev()]


def test_gone_for_good_then_back_is_announced_again():
    t = NoticeTracker(withdraw_after=2)
    out = (
        t.observe("spot", [ev()]) + t.observe("spot", []) + t.observe("spot", []) + t.observe("spot", [ev()])
    )
    assert [e.withdrawn for e in out] == [False, True, False]


def test_a_second_occurrence_within_the_same_second_gets_its_own_id():
    # GCE maintenance has no id: two occurrences first seen in one second must not share the minted id
    t = NoticeTracker(withdraw_after=1)
    first = t.observe("maintenance", [ev("", "maintenance-terminate")])[0]
    assert t.observe("maintenance", [])[0].withdrawn
    second = t.observe("maintenance", [ev("", "maintenance-terminate", at_s=0.5)])[0]
    assert first.event_id == "alibaba-maintenance-terminate-20260101T120000Z"
    assert second.event_id == first.event_id + "-2"
    # after a restart the restored notice keeps its id, and the next occurrence does not take it
    again = NoticeTracker(withdraw_after=1)
    again.restore("maintenance", first, key="maintenance/maintenance-terminate")
    assert again.observe("maintenance", [])[0].event_id == first.event_id  # withdrawn
    third = again.observe("maintenance", [ev("", "maintenance-terminate", at_s=0.7)])[0]
    assert third.event_id == first.event_id + "-2"


def test_cloud_withdrawal_is_immediate_and_unknown_withdrawals_are_ignored():
    t = NoticeTracker(withdraw_after=3)
    t.observe("maintenance", [ev("m1", "maintenance-reboot", 86400)])
    out = t.observe("maintenance", [ev("m1", "maintenance-reboot", 86400, withdrawn=True)])
    assert len(out) == 1 and out[0].withdrawn
    # AWS keeps listing completed events for a week: never seen active, never announced
    assert t.observe("maintenance", [ev("old", "maintenance-stop", -3600, withdrawn=True)]) == []


def test_sources_do_not_withdraw_each_other():
    t = NoticeTracker(withdraw_after=1)
    t.observe("spot", [ev("s")])
    t.observe("maintenance", [ev("m", "maintenance-reboot", 86400)])
    assert t.observe("maintenance", []) != [] and "s" in t.active


def test_deadline_moved_earlier_is_announced_again_later_is_not():
    t = NoticeTracker()
    t.observe("maintenance", [ev("m", deadline_s=86400)])
    assert t.observe("maintenance", [ev("m", deadline_s=90000)]) == []  # later: acting early is safe
    again = t.observe("maintenance", [ev("m", deadline_s=3600)])
    assert len(again) == 1 and again[0].deadline == T0 + timedelta(seconds=3600) and not again[0].withdrawn


def test_a_notice_without_an_id_is_one_notice_however_its_time_moves():
    """amazon-ec2-metadata-mock serves "time" = request time + 2 min on every read."""
    rng = random.Random(12)
    t = NoticeTracker(withdraw_after=2)
    t.instance = "i-0abc"
    first = t.observe("spot", [ev("", deadline_s=120.0)])
    assert [e.event_id for e in first] == ["alibaba-spot-termination-i-0abc-20260101T120000Z"]
    for i in range(1, 200):  # later every read, by a random step: nothing to say
        assert t.observe("spot", [ev("", deadline_s=120.0 + i + rng.random(), at_s=i)]) == []
    assert [n.event.event_id for n in t.active.values()] == [first[0].event_id]
    # the service restarts with an earlier time: the same notice again, never a second one
    again = t.observe("spot", [ev("", deadline_s=60.0, at_s=200)])
    assert [(e.event_id, e.deadline) for e in again] == [(first[0].event_id, T0 + timedelta(seconds=60))]
    assert not again[0].withdrawn and len(t.active) == 1


def test_a_notice_without_an_id_gone_and_back_is_a_new_occurrence():
    # a stopped spot instance can be started and reclaimed again: a new notice, a new id
    t = NoticeTracker(withdraw_after=1)
    [a] = t.observe("spot", [ev("", kind="spot-stop")])
    [gone] = t.observe("spot", [])
    [b] = t.observe("spot", [ev("", kind="spot-stop", at_s=3600)])
    assert gone.withdrawn and gone.event_id == a.event_id
    assert b.event_id != a.event_id and not b.withdrawn


def test_kinds_and_sources_without_ids_are_told_apart():
    t = NoticeTracker(withdraw_after=3)
    out = t.observe("spot", [ev("", kind="spot-termination")])
    out += t.observe("rebalance", [ev("", kind="rebalance-recommendation", deadline_s=None)])
    out += t.observe("maintenance", [ev("", kind="maintenance-reboot"), ev("m-1", kind="maintenance-reboot")])
    assert len({e.event_id for e in out}) == 4 and all(e.event_id for e in out)


def test_a_minted_id_survives_a_restart(tmp_path):
    store = NoticeStore(tmp_path / "n.json")
    t = NoticeTracker()
    [a] = t.observe("spot", [ev("")])
    store.save("aws", t.active)
    t2 = NoticeTracker()
    for source, e, key in store.load("aws"):
        t2.restore(source, e, key)
    assert t2.observe("spot", [ev("", deadline_s=301.5, at_s=30)]) == []
    [earlier] = t2.observe("spot", [ev("", deadline_s=200, at_s=31)])
    assert earlier.event_id == a.event_id and t2.find(a.event_id) is not None


def test_store_round_trip_and_restore(tmp_path):
    store = NoticeStore(tmp_path / "n.json")
    t = NoticeTracker()
    t.observe("spot", [ev("a")])
    t.observe("maintenance", [ev("m", "maintenance-reboot", None)])
    store.save("alibaba", t.active)
    loaded = store.load("alibaba")
    assert sorted((s, e.event_id, e.deadline) for s, e, _ in loaded) == [
        ("maintenance", "m", None),
        ("spot", "a", T0 + timedelta(seconds=300)),
    ]
    t2 = NoticeTracker()
    for source, e, key in loaded:
        t2.restore(source, e, key)
    assert t2.observe("spot", [ev("a", at_s=50)]) == []  # not new after the restart
    assert store.load("aws") == []  # another provider's notices are not ours
    assert not list(tmp_path.glob(".n.json.*")), "temp files left behind"


def test_corrupt_store_is_set_aside_not_lost(tmp_path):
    path = tmp_path / "n.json"
    path.write_text('{"version": 1, "provider": "alibaba", "active": [{"nonsense": ')
    assert NoticeStore(path).load("alibaba") == []
    assert not path.exists() and "nonsense" in (tmp_path / "n.corrupt").read_text()
    path.write_text(json.dumps({"version": 1, "provider": "alibaba", "active": [{"source": "spot"}]}))
    assert NoticeStore(path).load("alibaba") == []
    assert (tmp_path / "n.corrupt").exists()


def test_a_notice_saved_by_an_older_agent_is_the_same_notice(tmp_path):
    """Saved before identity keys (the id a hash of the body): upgraded mid-notice, not announced again."""
    path = tmp_path / "n.json"
    old = ev("aws-spot-termination-3f2a9c0d1e2b4a5f")
    maint = ev("instance-event-0abc", kind="maintenance-reboot")
    doc = {"version": 1, "provider": "aws", "active": []}
    for source, e in (("spot", old), ("maintenance", maint)):
        doc["active"].append({"source": source, "event": event_to_json(replace(e, provider="aws"))})
    path.write_text(json.dumps(doc))
    t = NoticeTracker()
    for source, e, key in NoticeStore(path).load("aws"):
        t.restore(source, e, key)
    moved = replace(ev("", deadline_s=310, at_s=5), provider="aws")
    assert t.observe("spot", [moved]) == []  # the same reclaim, its time moved a little later
    assert t.find("aws-spot-termination-3f2a9c0d1e2b4a5f") is not None
    assert "instance-event-0abc" in t.active  # a cloud's own id stays the key
