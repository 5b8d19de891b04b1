"""Step figures from the trainer: tna_client's guard.step() aggregates and hands over one report a
period; the agent parses it strictly, exports the node's figures labelled with the job, and says in
its status when they are missing. A real trainer process (guard.step() in a loop) and the real daemon."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, run_cli, wait_until
from tna_client import PreemptionGuard
from tna_client.steps import job_from_env, period_from, quantile, summarize

from agent.steps.figures import node_figures
from agent.steps.report import collect, parse_steps


def _report(path: Path) -> dict:
    return json.loads(path.read_text())


def test_guard_step_reports_once_a_period_with_count_sum_and_quantiles(tmp_path, monkeypatch):
    monkeypatch.setenv("TNA_STEP_REPORT", "0.3")
    monkeypatch.setenv("TNA_JOB", "llama-7")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    guard = PreemptionGuard(signal=None, request_file=str(tmp_path / "request.json"), rank=3)
    assert guard.step_period == 0.3
    path = tmp_path / f"steps-{os.getpid()}.json"
    writes = 0
    mtime = None
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        guard.step()
        time.sleep(0.01)
        if path.exists() and path.stat().st_mtime_ns != mtime:
            mtime = path.stat().st_mtime_ns
            writes += 1
    body = _report(path)
    assert 2 <= writes <= 4  # at most once a period: ~1 s / 0.3 s, never once a step (~90 steps)
    assert body["kind"] == "steps" and body["rank"] == 3 and body["local_rank"] == 1
    assert body["world_size"] == 4 and body["job"] == "llama-7"
    assert 40 <= body["count"] <= 100  # steps whose report went out so far
    assert 0.01 <= body["sum"] / body["count"] <= 0.05  # each step slept 10 ms
    assert 0.009 <= body["period"]["p50"] <= body["period"]["p99"] <= body["period"]["max"]
    report = parse_steps(path.read_bytes())  # the agent's parser takes what the client writes
    assert report.count == body["count"] and report.job == "llama-7"
    guard.uninstall()
    assert not path.exists()  # a guard that is done takes its report back


def test_no_agent_no_report_and_the_counts_carry_on(tmp_path, monkeypatch):
    monkeypatch.setenv("TNA_STEP_REPORT", "0.2")
    monkeypatch.delenv("TNA_CHECKPOINT_REQUEST_FILE", raising=False)
    guard = PreemptionGuard(signal=None, discovery_files=[str(tmp_path / "nobody.json")], install=False)
    guard._explicit = None
    for _ in range(30):
        guard.step()
        time.sleep(0.01)
    assert guard._step_count >= 10  # counted though nobody listens; nothing raised, nothing written
    assert not list(tmp_path.iterdir())


def test_job_and_period_come_from_the_environment_and_the_record():
    assert job_from_env({"SLURM_JOB_ID": "8812", "TORCHELASTIC_RUN_ID": "r1"}) == "8812"
    assert job_from_env({"TNA_JOB": "mine", "SLURM_JOB_ID": "8812"}) == "mine"
    assert job_from_env({"TORCHELASTIC_RUN_ID": "none"}) is None  # torchrun's default: no name
    assert period_from({"step_report": 2.0}, {}) == 2.0
    assert period_from({"step_report": 2.0}, {"TNA_STEP_REPORT": "7"}) == 7.0
    assert period_from({"step_report": "bad"}, {}) == 5.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0 and quantile([1.0], 0.99) == 1.0
    s = summarize([0.3, 0.1, 0.2])
    assert s["count"] == 3 and abs(s["sum"] - 0.6) < 1e-9 and s["max"] == 0.3


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[]", "kind"),
        (b'{"kind": "steps", "pid": 0, "rank": 0}', "pid"),
        (b'{"kind": "steps", "pid": 5, "rank": 0, "job": "a b", "period": {}}', "job"),
        (b'{"kind": "steps", "pid": 5, "rank": 0, "period": {"count": -1}}', "count"),
        (
            b'{"kind": "steps", "pid": 5, "rank": 0, "count": 1, "sum": 1, "time": "2025-01-01T00:00:00Z",'
            b' "period": {"count": 1, "sum": 1, "p50": 1, "p90": 1, "p99": 1e99, "max": 1}}',
            "p99",
        ),
    ],
)
def test_bad_reports_are_refused_with_a_reason(body, why):
    with pytest.raises(ValueError, match=why):
        parse_steps(body)


def _write(d: Path, pid: int, rank: int, local: int, count: int, p50: float, job: str | None = "j") -> None:
    body = {
        "kind": "steps",
        "pid": pid,
        "rank": rank,
        "local_rank": local,
        "world_size": 8,
        "job": job,
        "count": count,
        "sum": count * p50,
        "period": {"count": 10, "sum": 10 * p50, "p50": p50, "p90": p50, "p99": p50 * 1.5, "max": p50 * 2},
        "time": "2025-03-14T06:11:00Z",
    }
    (d / f"steps-{pid}.json").write_text(json.dumps(body))


def test_node_figures_count_the_lowest_local_rank_and_take_the_slowest_quantiles(tmp_path):
    _write(tmp_path, 101, 9, 1, 500, 0.4)
    _write(tmp_path, 100, 8, 0, 498, 0.3)
    (tmp_path / "steps-102.json").write_text("{")
    _write(tmp_path, 103, 10, 2, 500, 0.2)
    (tmp_path / "steps-103.json").rename(tmp_path / "steps-104.json")  # name and body disagree
    reports, bad = collect(tmp_path)
    assert set(reports) == {100, 101}
    assert bad == {
        "steps-102.json": "not JSON",
        "steps-104.json": "the pid in the name and in the report differ",
    }
    f = node_figures(reports)
    assert f is not None and f.count == 498 and f.job == "j"
    assert f.quantiles["p50"] == 0.4  # the slower rank sets the node's pace
    assert [r.rank for r in f.ranks] == [8, 9]
    # the Slurm seam: the agent's own pid -> job mapping wins over the environment
    assert node_figures(reports, job_of=lambda pid: "slurm-77").job == "slurm-77"  # type: ignore[union-attr]
    assert node_figures({}) is None


TRAINER = """
import sys, time
sys.path.insert(0, {client!r})
from tna_client import PreemptionGuard
g = PreemptionGuard(signal=None)
while True:
    g.step()
    time.sleep(0.02)
"""


def test_the_daemon_exports_the_trainers_steps_and_says_when_they_are_missing(agent_factory, tmp_path):
    agent = agent_factory({"trainer": {"step_report": "1s"}})
    st = agent.status()["steps"]
    assert st["missing"] and "step figures missing" in st["lines"][0]
    assert "training_node_train_step_reporters 0.0" in agent.metrics()
    shown = run_cli("status", "--control-socket", agent.control_socket)
    assert "[steps]" in shown.stdout and "step figures missing" in shown.stdout, shown.stdout + shown.stderr
    record = tmp_path / "agent" / "run" / "agent.json"
    assert json.loads(record.read_text())["step_report"] == 1.0
    env = {
        **os.environ,
        "TNA_CHECKPOINT_REQUEST_FILE": json.loads(record.read_text())["request_file"],
        "TNA_JOB": "bert-3",
        "RANK": "5",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "8",
    }
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER.format(client=str(REPO / "client"))], env=env)
    try:
        steps = re.compile(r'^training_node_train_steps_total\{job_id="bert-3"\} (\d+)', re.M)
        first = int(agent.wait_for(lambda: steps.search(agent.metrics()), 20, what="steps").group(1))
        agent.wait_for(
            lambda: int(steps.search(agent.metrics()).group(1)) > first + 20, 20, what="more steps"
        )
        text = agent.metrics()
        assert (
            'training_node_train_rank_info{job_id="bert-3",local_rank="1",rank="5",world_size="8"} 1.0'
            in text
        )
        p50 = float(
            re.search(r'training_node_train_step_seconds\{job_id="bert-3",quantile="0.5"\} (\S+)', text)[1]
        )
        assert 0.015 <= p50 <= 0.5  # 20 ms sleeps, on a loaded box
        st = agent.status()["steps"]
        assert not st["missing"] and st["job"] == "bert-3" and st["ranks"] == [5]
    finally:
        trainer.kill()
        trainer.wait()
    # the trainer is gone: its report goes once it is stale, and with it the series
    wait_until(
        lambda: "training_node_train_step_reporters 0.0" in agent.metrics(), 30, 0.5, "the report dropped"
    )
    assert "training_node_train_steps_total" not in agent.metrics()
