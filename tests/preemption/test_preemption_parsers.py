"""Pure parsers of each cloud's metadata bodies and their time formats, in isolation."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.preemption.clouds import alibaba, aws, azure, gcp, tencent
from agent.preemption.provider import Reading, TimeFormatError, parse_iso_time
from agent.preemption.wire import BodyFormatError


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# --- time formats ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2015-01-05T18:02:00Z", utc(2015, 1, 5, 18, 2)),
        ("2015-01-05T18:02:00z", utc(2015, 1, 5, 18, 2)),
        ("2015-01-05T18:02:00.250Z", utc(2015, 1, 5, 18, 2, 0, 250000)),
        ("2015-01-05T20:02:00+02:00", utc(2015, 1, 5, 18, 2)),
        ("2015-01-05T10:02:00-0800", utc(2015, 1, 5, 18, 2)),
        ("  2015-01-05T18:02:00Z\n", utc(2015, 1, 5, 18, 2)),
    ],
)
def test_rfc3339(text, expected):
    got = parse_iso_time(text)
    assert got == expected and got.tzinfo == UTC


@pytest.mark.parametrize(
    "text",
    ["2015-01-05T18:02:00", "05/01/2015 18:02", "2015-13-05T18:02:00Z", "2015-02-30T00:00:00Z", "", "soon"],
)
def test_rfc3339_refuses_zone_less_or_wrong(text):
    with pytest.raises(TimeFormatError):
        parse_iso_time(text)


def test_aws_event_time():
    assert aws.parse_aws_time("21 Jan 2019 09:00:43 GMT") == utc(2019, 1, 21, 9, 0, 43)
    assert aws.parse_aws_time("2 Jan 2006 15:04:05 GMT") == utc(2006, 1, 2, 15, 4, 5)
    for bad in (
        "21 Jan 2019 09:00:43 PST",
        "2019-01-21T09:00:43Z",
        "21 Foo 2019 09:00:43 GMT",
        "31 Feb 2019 09:00:43 GMT",
    ):
        with pytest.raises(TimeFormatError):
            aws.parse_aws_time(bad)


def test_rfc1123():
    assert azure.parse_rfc1123("Mon, 19 Sep 2016 18:29:47 GMT") == utc(2016, 9, 19, 18, 29, 47)
    for bad in (
        "19 Sep 2016 18:29:47 GMT",
        "Mon, 19 Sep 2016 18:29:47 CET",
        "Mon, 19 Sept 2016 18:29:47 GMT",
    ):
        with pytest.raises(TimeFormatError):
            azure.parse_rfc1123(bad)


def test_tencent_time_is_utc_plus_8_without_a_marker():
    assert tencent.parse_tencent_time("2018-08-18 12:05:33") == utc(2018, 8, 18, 4, 5, 33)
    # a time that carries its zone is read with it, not shifted again
    assert tencent.parse_tencent_time("2018-08-18T04:05:33Z") == utc(2018, 8, 18, 4, 5, 33)
    assert tencent.parse_tencent_time("2018-08-18 12:05:33+08:00") == utc(2018, 8, 18, 4, 5, 33)


# --- Alibaba ------------------------------------------------------------------------------------------


def test_alibaba_spot_termination():
    spot = alibaba.parse_spot_termination("2015-01-05T18:02:00Z\n")
    assert spot.time == utc(2015, 1, 5, 18, 2) and spot.warning is None
    zone_less = alibaba.parse_spot_termination("2015-01-05 18:02:00")
    assert zone_less.time == utc(2015, 1, 5, 18, 2) and "read as UTC" in zone_less.warning
    for garbage in ("", "<html>error</html>", "\x00\xff", "tomorrow"):
        with pytest.raises(BodyFormatError):
            alibaba.parse_spot_termination(garbage)


API_SHAPE = [
    {
        "EventId": "e-t4n0fa1gs1lz3k2s4m1f",
        "EventType": {"Code": 1, "Name": "SystemMaintenance.Reboot"},
        "EventCycleStatus": {"Code": 24, "Name": "Scheduled"},
        "NotBefore": "2024-03-02T16:00:00Z",
    },
    {
        "EventId": "e-2",
        "EventType": {"Code": 4, "Name": "SystemMaintenance.Redeploy"},
        "EventCycleStatus": {"Code": 8, "Name": "Canceled"},
        "NotBefore": "2024-03-03T16:00:00Z",
    },
]


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(API_SHAPE),
        json.dumps({"Events": API_SHAPE}),
        json.dumps({"InstanceSystemEventSet": {"InstanceSystemEventType": API_SHAPE}}),
        # flat spellings
        json.dumps(
            [
                {
                    "event-id": "e-t4n0fa1gs1lz3k2s4m1f",
                    "code": "SystemMaintenance.Reboot",
                    "status": "Scheduled",
                    "not-before": "2024-03-02T16:00:00Z",
                },
                {
                    "event_id": "e-2",
                    "Code": "SystemMaintenance.Redeploy",
                    "State": "canceled",
                    "NotBefore": "2024-03-03T16:00:00Z",
                },
            ]
        ),
    ],
)
def test_alibaba_system_events_shapes(body):
    events = alibaba.parse_active_system_events(body)
    assert [(e.event_id, e.code) for e in events] == [
        ("e-t4n0fa1gs1lz3k2s4m1f", "SystemMaintenance.Reboot"),
        ("e-2", "SystemMaintenance.Redeploy"),
    ]
    assert events[0].not_before == utc(2024, 3, 2, 16) and events[0].status.lower() == "scheduled"
    assert events[1].status.lower() == "canceled"
    assert alibaba.maintenance_kind(events[0].code) == "maintenance-reboot"
    assert alibaba.maintenance_kind(events[1].code) == "maintenance-redeploy"


def test_alibaba_system_events_defensive():
    assert alibaba.parse_active_system_events("") == []
    assert alibaba.parse_active_system_events("[]") == []
    assert alibaba.parse_active_system_events("{}") == []
    # items that are not objects are skipped; a single event object on its own is accepted
    assert alibaba.parse_active_system_events('[1, "x", null]') == []
    [one] = alibaba.parse_active_system_events('{"Code": "SystemMaintenance.Stop", "NotBefore": "bad time"}')
    assert one.code == "SystemMaintenance.Stop" and one.not_before is None and "RFC 3339" in one.time_problem
    with pytest.raises(BodyFormatError):
        alibaba.parse_active_system_events("<html>busy</html>")
    with pytest.raises(BodyFormatError):
        alibaba.parse_active_system_events('"just a string"')
    assert alibaba.maintenance_kind("SystemMaintenance.RebootAndIsolateErrorDisk") == "maintenance-reboot"
    assert alibaba.maintenance_kind("InstanceExpiration.Delete") == "maintenance-terminate"
    assert alibaba.maintenance_kind("Something.New") == "maintenance-other"


@given(st.text(max_size=300))
def test_alibaba_parsers_raise_only_format_errors(text):
    for parse in (
        alibaba.parse_active_system_events,
        alibaba.parse_spot_termination,
        tencent.parse_spot_termination,
    ):
        try:
            parse(text)
        except BodyFormatError:
            pass


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=5),
        max_leaves=20,
    )
)
def test_json_parsers_survive_any_json_shape(doc):
    body = json.dumps(doc)
    for parse in (
        alibaba.parse_active_system_events,
        aws.parse_scheduled_events,
        aws.parse_instance_action,
        aws.parse_rebalance,
        azure.parse_scheduled_events,
    ):
        try:
            parse(body)
        except BodyFormatError:
            pass


# --- AWS ---------------------------------------------------------------------------------------------


def test_aws_instance_action_and_rebalance():
    act = aws.parse_instance_action('{"action": "terminate", "time": "2017-09-18T08:22:00Z"}')
    assert (act.action, act.time, act.time_problem) == ("terminate", utc(2017, 9, 18, 8, 22), None)
    stop = aws.parse_instance_action('{"action": "stop", "time": "18 Sep 2017"}')
    assert stop.action == "stop" and stop.time is None and stop.time_problem
    assert aws.parse_rebalance('{"noticeTime": "2020-10-27T08:22:00Z"}').notice_time == "2020-10-27T08:22:00Z"
    for bad in ("", "{}", '{"time": "x"}', "terminate"):
        with pytest.raises(BodyFormatError):
            aws.parse_instance_action(bad)


def test_aws_scheduled_events():
    body = json.dumps(
        [
            {
                "NotBefore": "21 Jan 2019 09:00:43 GMT",
                "Code": "system-reboot",
                "Description": "scheduled reboot",
                "EventId": "instance-event-0d59937288b749b32",
                "NotAfter": "21 Jan 2019 09:17:23 GMT",
                "State": "active",
            },
            {
                "NotBefore": "22 Jan 2019 09:00:43 GMT",
                "Code": "instance-stop",
                "Description": "[Canceled] stop",
                "EventId": "instance-event-2",
                "NotAfter": "22 Jan 2019 09:17:23 GMT",
                "State": "canceled",
            },
            {
                "NotBefore": "23 Jan 2019 09:00:43 GMT",
                "Code": "instance-retirement",
                "Description": "[Completed] retirement",
                "EventId": "instance-event-3",
            },
        ]
    )
    events = aws.parse_scheduled_events(body)
    assert [(e.event_id, e.state) for e in events] == [
        ("instance-event-0d59937288b749b32", "active"),
        ("instance-event-2", "canceled"),
        ("instance-event-3", "completed"),  # from the Description prefix when State is missing
    ]
    assert events[0].not_before == utc(2019, 1, 21, 9, 0, 43)
    assert aws.parse_scheduled_events("[]") == [] and aws.parse_scheduled_events("") == []


# --- GCP ---------------------------------------------------------------------------------------------


def test_gcp_values():
    assert gcp.parse_preempted("TRUE") is True and gcp.parse_preempted("FALSE\n") is False
    assert gcp.parse_maintenance_event("NONE") is None
    assert gcp.parse_maintenance_event("MIGRATE_ON_HOST_MAINTENANCE") == "MIGRATE_ON_HOST_MAINTENANCE"
    for bad in ("", "yes", "<html>"):
        with pytest.raises(BodyFormatError):
            gcp.parse_preempted(bad)
    for bad in ("", "none of it", "<html>"):
        with pytest.raises(BodyFormatError):
            gcp.parse_maintenance_event(bad)


# --- Azure -------------------------------------------------------------------------------------------


def test_azure_scheduled_events():
    body = json.dumps(
        {
            "DocumentIncarnation": 7,
            "Events": [
                {
                    "EventId": "602d9444-d2cd-49c7-8624-8643e7171297",
                    "EventType": "Preempt",
                    "ResourceType": "VirtualMachine",
                    "Resources": ["vm-a"],
                    "EventStatus": "Scheduled",
                    "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT",
                    "Description": "",
                    "EventSource": "Platform",
                    "DurationInSeconds": -1,
                },
                {
                    "EventId": "e2",
                    "EventType": "Freeze",
                    "Resources": ["vm-b"],
                    "EventStatus": "Started",
                    "NotBefore": "",
                    "DurationInSeconds": 9,
                },
                {"EventType": "Reboot"},  # no id: skipped
            ],
        }
    )
    doc = azure.parse_scheduled_events(body)
    assert doc.incarnation == 7
    first, second = doc.events
    assert first.event_type == "Preempt" and first.not_before == utc(2016, 9, 19, 18, 29, 47)
    assert first.resources == ("vm-a",) and first.source == "Platform" and first.duration_seconds is None
    assert second.status == "Started" and second.not_before is None and second.time_problem is None
    assert second.duration_seconds == 9
    assert azure.parse_scheduled_events('{"DocumentIncarnation": 1, "Events": []}').events == ()
    for bad in ("", "[]", '{"Events": {}}', "<html>"):
        with pytest.raises(BodyFormatError):
            azure.parse_scheduled_events(bad)


# --- shared ------------------------------------------------------------------------------------------


def test_reading_drops_implausible_deadlines_but_keeps_the_notice():
    now = datetime.now(UTC)
    r = Reading("aws", now, max_ahead=90 * 86400)
    r.add("spot-termination", "a", now + timedelta(seconds=120), "")
    r.add("spot-termination", "b", now - timedelta(seconds=30), "")  # a little late: kept, negative
    r.add("spot-termination", "c", now + timedelta(days=3650), "")  # absurdly far
    r.add("spot-termination", "d", now - timedelta(days=30), "")  # long past
    r.add("maintenance-reboot", "e", None, "", time_problem="bad time")
    r.add("maintenance-stop", "f", now - timedelta(days=6), "", withdrawn=True)  # AWS keeps a week
    by_id = {n.event_id: n for n in r.notices}
    assert by_id["a"].seconds_remaining == pytest.approx(120)
    assert by_id["b"].seconds_remaining == pytest.approx(-30)
    assert by_id["c"].deadline is None and by_id["d"].deadline is None
    assert len(r.notices) == 6 and by_id["f"].deadline is not None
    assert sum("implausible" in w for w in r.warnings) == 2 and any("bad time" in w for w in r.warnings)
