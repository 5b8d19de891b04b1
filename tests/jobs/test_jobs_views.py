"""The job seen by every face, on records built by hand: GPU -> job (pure), the alerts' field, the
ledger charging each job its own lost work, report --by job, the status lines."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from agent.alerts.kinds import facts, render
from agent.alerts.message import NodeIdentity
from agent.alerts.scene import GpuInfo, Scene
from agent.cli.report import render as render_report
from agent.core.events import CheckpointEvent, GpuFaultEvent, PreemptionEvent
from agent.core.vocabulary import CheckpointPhase
from agent.ledger import jobs as by_jobs
from agent.ledger.assign import NO_JOB, Bucket, Pressures, gpu_state
from agent.ledger.book import Book
from agent.ledger.state import Ledger
from agent.sources.gpu.part import GpuPart, GpuProcess, GpuStats
from agent.sources.jobs.gpus import gpu_jobs
from agent.sources.jobs.part import JobIdentity, JobPart
from agent.sources.jobs.status import lines, summary

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ledger"))
from ledger_synth import CFG, gpu

from agent.classifier.published import unclassified
from agent.ledger.assign import INDEX

LLAMA = JobIdentity("4127", name="llama-7b", user="alice", step="0")
EVAL = JobIdentity("4200", name="eval", user="bob")
NOW = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)


def gpus(*pids: tuple[int, ...]) -> GpuPart:
    return GpuPart(
        "550",
        "12.550",
        tuple(
            GpuStats(i, f"GPU-{i}", "H100", True, processes=tuple(GpuProcess(p, None) for p in ps))
            for i, ps in enumerate(pids)
        ),
    )


def test_each_gpu_is_its_processes_job():
    part = JobPart(jobs=(LLAMA, EVAL), pids={11: "4127", 12: "4127", 21: "4200"})
    on = gpu_jobs(gpus((11,), (12,), (21,), (), (99,)), part)
    assert {i: j.job_id for i, j in on.items()} == {0: "4127", 1: "4127", 2: "4200"}  # 3 idle, 4 unknown pid
    assert gpu_jobs(gpus((11,)), None) == {} and gpu_jobs(None, part) == {}


def test_without_nvml_processes_one_job_holds_every_gpu_and_two_hold_none():
    one = JobPart(jobs=(LLAMA,), pids={11: "4127"})
    assert set(gpu_jobs(gpus((), ()), one)) == {0, 1}  # a container hides NVML's process list
    two = JobPart(jobs=(LLAMA, EVAL), pids={11: "4127", 21: "4200"})
    assert gpu_jobs(gpus((), ()), two) == {}  # which GPU is whose cannot be told


@pytest.mark.parametrize(("lang", "word"), [("en", "will lose 8.0 GPU-h"), ("zh-CN", "将损失 8.0 GPU 时")])
def test_every_alert_names_the_jobs_and_what_they_would_lose(lang: str, word: str):
    node = NodeIdentity("cn-17")
    sc = Scene(node, (GpuInfo(0, "H100"),), ZoneInfo("UTC"), NOW, jobs=((LLAMA, 8 * 3600.0), (EVAL, None)))
    events = [
        PreemptionEvent("aws", "spot-termination", "e-1", NOW, NOW),
        CheckpointEvent(CheckpointPhase.MISSED, "e-1", "spot-termination", NOW, NOW),
        GpuFaultEvent("lost", 0, "GPU-0", "H100", at=NOW),
    ]
    for ev in events:
        f = facts(ev)
        assert f is not None
        msg = render(ev, f, sc, lang)
        field = dict(msg.fields)["节点上的作业" if lang == "zh-CN" else "Jobs on the node"]
        assert field == f"job 4127 `llama-7b` (alice) {word}; job 4200 `eval` (bob)"
        assert dict(msg.labels)["job_id"] == "4127,4200"
    plain = render(events[0], facts(events[0]), Scene(node, (), ZoneInfo("UTC"), NOW), lang)  # type: ignore[arg-type]
    assert "job_id" not in dict(plain.labels)


def _working_ledger() -> Ledger:
    led = Ledger(Book(1.0, 3600.0, 86400.0))
    g = [gpu(0, "working"), gpu(1, "working"), gpu(2, "starved", busy=False)]
    states = [gpu_state(x, unclassified(CFG)) for x in g]
    for t in range(1, 101):
        led.tick(1_000_000.0 + t, 1.0, g, states, True, Pressures(), 0.01, ["4127", "4200", NO_JOB])
    return led


def test_the_work_lost_at_a_reclaim_is_charged_to_the_job_that_did_it():
    led = _working_ledger()
    lose = led.would_lose_by_job(1_000_100.0)
    assert lose["4127"] == pytest.approx(100.0, abs=1.01) and lose["4200"] == pytest.approx(100.0, abs=1.01)
    assert NO_JOB not in lose  # an idle GPU with nothing on it has no work to lose
    led.checkpoint(CheckpointPhase.REQUESTED, "e-1", 1_000_100.0, False, None, 1_000_200.0)
    r = led.checkpoint(CheckpointPhase.MISSED, "e-1", 1_000_101.0, False, None)
    assert r is not None
    assert set(r.jobs) == {"4127", "4200"} and sum(r.jobs.values()) == pytest.approx(r.lost_gpu_seconds)
    jobs = led.book.jobs_since(0.0)
    for key in ("4127", "4200"):
        assert jobs[key][0][INDEX[Bucket.LOST]] == pytest.approx(r.jobs[key])
        assert jobs[key][0][INDEX[Bucket.PRODUCTIVE]] < 1.01  # what was lost is no longer productive
    assert jobs[NO_JOB][0][INDEX[Bucket.LOST]] == 0


def test_report_by_job_prints_hours_buckets_and_money():
    led = _working_ledger()
    led.name_jobs([LLAMA.as_dict(), EVAL.as_dict()])
    entries = by_jobs.by_job(led.book.jobs_since(0.0), led.job_names, "CNY")
    assert [e["job_id"] for e in entries][-1] == NO_JOB
    text = "\n".join(by_jobs.lines(entries))
    assert "job 4127 `llama-7b` (alice): 0.028 GPU-h, goodput 100.0%, 1.00 CNY (wasted 0.00)" in text
    assert "no job: 0.028 GPU-h, goodput 0.0%, 1.00 CNY (wasted 1.00)" in text
    g = {
        "window_seconds": 100,
        "since": "x",
        "gpus": 3,
        "gpu_seconds": 300.0,
        "ratio": 0.66,
        "buckets": {str(b): 0.0 for b in Bucket},
        "cost": None,
        "jobs": entries,
    }
    assert "by job:" in render_report(g, "job") and "by job:" not in render_report(g)


def test_status_lines_name_the_job_its_step_and_pids():
    part = JobPart(jobs=(LLAMA,), pids={11: "4127", 12: "4127"}, problem="scontrol not found")
    text = "\n".join(lines(summary(part, None)))
    assert "job 4127 `llama-7b` (alice), step 0: pids 11, 12 (cgroup)" in text
    assert "names unknown: scontrol not found" in text


def test_the_checkpoint_report_names_the_job_of_each_target():
    from agent.checkpoint.episodelog import Episode
    from agent.checkpoint.report import build_report, render_report

    ep = Episode("e1", "aws", "spot-termination", 1120.0, 1000.0, 1000.0, requested_at=1000.0)
    ep.deliveries = [
        {"pid": 11, "comm": "python", "source": "nvml", "signal": "SIGUSR1", "outcome": "signalled"}
    ]
    ep.jobs = [{**LLAMA.as_dict(), "pids": [11, 12]}]
    text = render_report(build_report(ep, 1.1, "aws"))
    assert "job 4127 `llama-7b` (alice): pids 11, 12" in text
    assert "pid 11 (python) in job 4127 via nvml" in text
    assert "in job" not in render_report(
        build_report(Episode("e2", "aws", "spot-termination", 1.0, 0.0, 0.0), 1.1, "")
    )


def test_top_shows_each_job_what_it_would_lose_and_the_job_of_each_process():
    pytest.importorskip("rich")
    from agent.cli.toppanels import trainer
    from agent.cli.topparts import View

    st = {
        "snapshot": {
            "jobs": [{**LLAMA.as_dict(), "pids": [11]}],
            "training_processes": [{"pid": 11, "comm": "python", "cpu_cores": 1.0, "allowed_cores": 4}],
        },
        "goodput": {"would_lose_gpu_seconds_by_job": {"4127": 8 * 3600.0}},
    }
    text = "\n".join(t.plain for t in trainer(st, View(120, None)))
    assert "job 4127 `llama-7b` (alice) step 0  a reclaim now loses 8.0 GPU-h" in text
    assert "pid 11 python job 4127" in text


def test_the_step_figures_carry_the_job_the_jobs_source_placed_the_trainer_in():
    from agent.snapshot import NodeSnapshot
    from agent.sources.jobs.gpus import job_of_pid
    from agent.steps.figures import node_figures
    from agent.steps.report import StepReport

    snap = NodeSnapshot(1, 0.0, 0.0, jobs=JobPart(jobs=(LLAMA,), pids={11: "4127"}))
    assert job_of_pid(snap, 11) == "4127" and job_of_pid(snap, 12) is None
    assert job_of_pid(NodeSnapshot(1, 0.0, 0.0), 11) is None  # no jobs part this tick
    # as runtime/build.py hands it over: the placed job wins over the one the trainer's environment names
    period = {"count": 10.0, "sum": 5.0, "p50": 0.5, "p90": 0.5, "p99": 0.6, "max": 0.6}
    reports = {
        pid: StepReport(pid, rank, rank, 2, "torchrun-rdzv-1", 100, 50.0, period, 0.0)
        for rank, pid in enumerate((11, 12))
    }
    figures = node_figures(reports, lambda pid: job_of_pid(snap, pid))
    assert figures is not None and figures.job == "4127"
    assert node_figures({12: reports[12]}, lambda pid: job_of_pid(snap, pid)).job == "torchrun-rdzv-1"  # type: ignore[union-attr]
