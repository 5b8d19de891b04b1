"""[fleet]: the sentence a waiting node adds from the fleet's TrainingJobStraggler alert (pure), and the
config's checks. The live run against a real Prometheus is tests/fleet/test_straggler_live.py."""

from __future__ import annotations

import pytest

from agent.config import parse_config
from agent.fleet.peer import pace_note, query_for


def answer(*alerts: dict[str, str]) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": [{"metric": a} for a in alerts]}}


def test_the_note_names_the_straggler_with_its_class_and_reason():
    a = {"instance": "cn-17", "class": "data", "reason": "storage", "training_job": "llama"}
    assert pace_note(answer(a)) == "the job's pace is set by cn-17 (data/storage)"
    b = {**a, "instance": "cn-03", "class": "network", "reason": "link"}
    assert pace_note(answer(a, b)) == "the job's pace is set by cn-03 (network/link), cn-17 (data/storage)"
    many = [{**a, "instance": f"cn-{i}"} for i in range(5)]
    assert pace_note(answer(*many)).endswith("cn-2 (data/storage) and 2 more")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "body",
    [
        answer(),
        {"status": "error", "error": "bad query"},
        {"status": "success", "data": None},
        answer({"instance": "x\ny", "class": "data", "reason": "storage"}),  # never shown as it came
        "not json",
    ],
)
def test_no_straggler_no_note(body):
    assert pace_note(body) is None


def test_the_query_asks_for_the_jobs_firing_alert():
    assert query_for("llama-42") == (
        'ALERTS{alertname="TrainingJobStraggler", alertstate="firing", training_job="llama-42"}'
    )


def test_the_url_is_checked():
    assert parse_config({"fleet": {"prometheus_url": "http://198.18.0.1:9090/"}}).fleet.prometheus_url == (
        "http://198.18.0.1:9090"
    )
    with pytest.raises(Exception, match="expected http://host:port"):
        parse_config({"fleet": {"prometheus_url": "prometheus:9090"}})
