"""What the trainer says of its own pauses (issue 48, item 2): tna_client's spans in its step report,
the trainer source that reads them every tick, and, end to end, a real Lightning job that validates
every N steps under the real agent: its validations are named ``host/evaluation`` and booked as
``evaluation`` within 0.1 of the share its own log says it spent validating. The fake GPUs read as
working throughout, as a real GPU doing forward passes would: only the trainer tells evaluation."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from checkpoint_helpers import REPO
from conftest import wait_until
from test_client_frameworks import CLIENT_PY, client_env, need_client_venv
from tna_client import PreemptionGuard

from agent.core.vocabulary import TrainerSpan
from agent.devtools.fake_nvml import FakeNvml, device, library_dir
from agent.sources.trainer import collector as trainer_collector
from agent.sources.trainer.collector import TrainerCollector
from agent.sources.trainer.parse import parse_said
from agent.sources.trainer.part import Said, TrainerPart
from agent.sources.trainer.rates import covered, trainer_rates

CP = TrainerSpan.CHECKPOINT
EV = TrainerSpan.EVALUATION


def _guard(tmp_path: Path, monkeypatch) -> PreemptionGuard:
    monkeypatch.setenv("TNA_STEP_REPORT", "600")  # no period's report: only the spans write
    return PreemptionGuard(signal=None, request_file=str(tmp_path / "request.json"), rank=0)


def test_a_span_rewrites_the_report_as_it_begins_and_ends(tmp_path, monkeypatch) -> None:
    guard = _guard(tmp_path, monkeypatch)
    path = tmp_path / f"steps-{os.getpid()}.json"
    assert not path.exists()
    before = time.time()
    guard.begin("evaluation")  # before any step: the report goes out all the same
    body = json.loads(path.read_text())
    assert body["recent"] == [["evaluation", pytest.approx(before, abs=0.5), None]]
    said = parse_said(path.read_bytes())  # the agent's parser takes what the client writes
    assert said is not None and said.recent[0][0] == EV and said.recent[0][2] is None
    time.sleep(0.2)
    guard.end("evaluation")
    with guard.span("checkpoint"):
        time.sleep(0.1)
    guard.waited("data", 0.25)
    guard.step()
    body = json.loads(path.read_text())
    (k1, a1, b1), (k2, a2, b2) = body["recent"]
    assert (k1, k2) == ("evaluation", "checkpoint") and 0.19 <= b1 - a1 <= 0.5 and 0.09 <= b2 - a2 <= 0.4
    assert body["spans"]["evaluation"]["count"] == 1 and body["spans"]["checkpoint"]["count"] == 1
    assert body["spans"]["data"]["count"] == 0  # a wait is written with the next span or period
    guard.end("evaluation")  # none open: nothing happens
    with pytest.raises(ValueError, match="span kind must be one of"):
        guard.begin("lunch")
    guard._step_report(time.monotonic(), force=True)
    said = parse_said(path.read_bytes())
    assert said is not None and said.totals[TrainerSpan.DATA] == (1, 0.25)
    guard.uninstall()


GOOD = {
    "kind": "steps",
    "pid": 4242,
    "rank": 0,
    "local_rank": 0,
    "world_size": 1,
    "job": None,
    "count": 10,
    "sum": 5.0,
    "period": {"count": 1, "sum": 0.5, "p50": 0.5, "p90": 0.5, "p99": 0.5, "max": 0.5},
    "time": "2026-12-06T10:00:00.000Z",
    "spans": {"checkpoint": {"count": 1, "seconds": 3.0}, "evaluation": {"count": 0, "seconds": 0}},
    "recent": [["checkpoint", 1796551190.0, 1796551193.0]],
}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"spans": []}, "spans must be an object"),
        ({"spans": {"data": {"count": -1, "seconds": 1}}}, "spans.data.count"),
        ({"spans": {"evaluation": {"count": 1, "seconds": float("nan")}}}, "spans.evaluation.seconds"),
        ({"recent": [["data", 1796551190.0, None]]}, "each of recent must be"),
        ({"recent": [["checkpoint", 1796551190.0, 1796551100.0]]}, "a span's end"),
        ({"recent": [["checkpoint", 12, None]]}, "a span's start"),
        ({"recent": [["checkpoint", 1796551190.0, None]] * 65}, "at most 64"),
        ({"pid": 0}, "pid must be positive"),
        ({"time": "yesterday"}, "RFC 3339"),
    ],
)
def test_bad_spans_are_refused_with_a_reason(change: dict, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        parse_said(json.dumps({**GOOD, **change}).encode())


def test_a_report_without_spans_is_an_older_client_not_an_error() -> None:
    body = {k: v for k, v in GOOD.items() if k not in ("spans", "recent")}
    assert parse_said(json.dumps(body).encode()) is None


def test_the_parser_survives_any_mangling_of_a_real_report() -> None:
    """Fuzz: bytes cut, flipped and spliced from a real report are a Said, None or a ValueError."""
    raw = json.dumps(GOOD).encode()
    rnd = random.Random(48)
    for _ in range(3000):
        b = bytearray(raw)
        for _ in range(rnd.randint(1, 6)):
            op, i = rnd.random(), rnd.randrange(len(b))
            if op < 0.4:
                b[i] = rnd.randrange(256)
            elif op < 0.7:
                del b[i : i + rnd.randint(1, 20)]
            else:
                b[i:i] = rnd.choice([b"null", b"-1", b"1e400", b'"x"', b"[", b"{}", b"true"])
        try:
            said = parse_said(bytes(b))
        except ValueError:
            continue
        assert said is None or isinstance(said, Said)


def _said(recent, pid: int = 1, local: int | None = 0, data: float = 0.0) -> Said:
    totals = {CP: (0, 0.0), EV: (0, 0.0), TrainerSpan.DATA: (0, data)}
    return Said(pid, pid - 1, local, 1000.0, totals, tuple(recent))


def test_a_ticks_share_inside_spans_joins_a_ranks_spans_and_takes_the_most_held_rank() -> None:
    s = _said([(CP, 100.0, 100.4), (CP, 100.3, 100.6), (EV, 100.8, None)])
    assert covered(s, CP, 100.0, 101.0, 101.0) == pytest.approx(0.6)  # overlapping spans count once
    assert covered(s, EV, 100.0, 101.0, 101.0) == pytest.approx(0.2)  # open: until now
    waiting = _said([(CP, 100.5, 101.0)], pid=2, local=1, data=7.0)  # at the barrier longer
    rates = trainer_rates(TrainerPart((), 0, 100.0), TrainerPart((s, waiting), 0, 101.0), 1.0)
    assert rates.saving == pytest.approx(0.6) and rates.evaluating == pytest.approx(0.2)
    assert rates.reporting == 2 and rates.data_seconds == 0.0  # the lowest local rank's wait
    # a tick inside both: saving and evaluating never add up to more than the tick
    both = _said([(CP, 100.0, None), (EV, 100.0, None)])
    r = trainer_rates(TrainerPart((), 0, 100.0), TrainerPart((both,), 0, 101.0), 1.0)
    assert r.saving == 1.0 and r.evaluating == 0.0


def test_the_collector_reads_a_changed_report_and_forgets_a_dead_trainers_open_span(
    tmp_path, monkeypatch
) -> None:
    c = TrainerCollector(tmp_path)
    assert c.collect().said == ()
    f = tmp_path / "steps-4242.json"
    now = datetime.now(UTC).isoformat()
    f.write_text(json.dumps({**GOOD, "time": now, "recent": [["evaluation", 1796551190.0, None]]}))
    (tmp_path / "steps-77.json").write_text("{not json")
    (tmp_path / "steps-78.json").write_text(json.dumps(GOOD))  # its name and its pid differ
    part = c.collect()
    assert [s.pid for s in part.said] == [4242] and part.unusable == 2
    reads = []
    monkeypatch.setattr(trainer_collector, "parse_said", lambda raw: reads.append(raw) or parse_said(raw))
    c.collect()
    assert reads == []  # nothing changed: nothing parsed again
    # pid 4242 is no process here and its report is older than STALE: its open span says nothing more
    monkeypatch.setattr(trainer_collector, "STALE", 0.0)
    assert TrainerCollector(tmp_path, str(tmp_path / "no-proc")).collect().said == ()


# --- a real Lightning job under the real agent -------------------------------------------------------

CONFIG = {
    "agent": {"interval": "250ms"},
    "classifier": {
        "window": "8s",
        "evaluate_every": "1s",
        "warmup": "0s",
        "sustain": "0s",
        "confirmations": 2,
    },
    "goodput": {"resolution": "1s", "settle": "1h", "poll": "200ms"},
}


def _booked(text: str) -> dict[str, float]:
    """GPU-seconds by bucket, settled and unsettled, from the agent's /metrics."""
    out: dict[str, float] = {}
    for name in ("training_node_gpu_seconds_total", "training_node_gpu_seconds_unsettled"):
        for m in re.finditer(rf'^{name}\{{bucket="([a-z-]+)"[^}}]*\}} (\S+)$', text, re.M):
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def _validating(log: Path, t1: float, t2: float) -> float:
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.exists() else []
    inside = sum(max(0.0, min(x["end"], t2) - max(x["begin"], t1)) for x in lines)
    return inside / (t2 - t1)


@pytest.mark.slow
def test_a_lightning_job_validating_every_n_steps_is_named_and_booked_as_evaluation(
    agent_factory, tmp_path
) -> None:
    need_client_venv()
    request = tmp_path / "cp" / "request.json"
    ckdir = tmp_path / "run"
    val_log = tmp_path / "validations.jsonl"
    nvml = FakeNvml(
        tmp_path / "nvml.json",
        gpus=[device(i, utilization_gpu=97, sm_active=85.0, power_mw=600_000) for i in range(2)],
    )
    env = {"LD_LIBRARY_PATH": str(library_dir()), "FAKE_NVML_STATE": str(nvml.path)}
    trainer = {
        "discover": [f"cmdline:{re.escape(str(ckdir))}"],
        "request_file": str(request),
        "discover_interval": "1s",
        "step_report": "1s",
    }
    agent = agent_factory({**CONFIG, "trainer": trainer}, env=env)
    cmd = [
        str(CLIENT_PY),
        str(REPO / "examples" / "lightning_train.py"),
        "--checkpoint-dir",
        str(ckdir),
        "--step-seconds",
        "0.05",
        "--val-every",
        "10",
        "--val-batches",
        "6",
        "--val-seconds",
        "0.1",
        "--val-log",
        str(val_log),
        "--max-steps",
        "100000",
    ]
    log = tmp_path / "job.log"
    with open(log, "wb") as out:
        job = subprocess.Popen(
            cmd,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=client_env(TNA_CHECKPOINT_REQUEST_FILE=str(request)),
        )
    try:
        for i in range(2):  # the job's process on the fake GPUs, as NVML would list it
            nvml.set(i, processes=[{"pid": job.pid, "used_memory_bytes": 1 << 30}])
        wait_until(
            lambda: job.poll() is None and val_log.exists() and val_log.read_text().count("\n") >= 2,
            timeout=120,
            interval=0.2,
            what="the job's first validations",
            detail=lambda: log.read_text()[-2000:],
        )
        t1, a = time.time(), _booked(agent.metrics())
        status = agent.wait_for(
            lambda: (
                (v := agent.status()["classifier"])["verdict"] == "host"
                and v["sub_reason"] == "evaluation"
                and v
            ),
            timeout=60,
            what="host/evaluation",
        )
        time.sleep(max(0.0, 12.0 - (time.time() - t1)))  # several validations booked
        t2, b = time.time(), _booked(agent.metrics())
        assert job.poll() is None, log.read_text()[-2000:]
    finally:
        job.kill()
        job.wait()
    reasons = " ".join(status["reasons"])
    held = re.search(r"evaluation held the training (\d+)% of the time \(from the trainer\)", reasons)
    truth = _validating(val_log, t1, t2)
    said = {k: status[k] for k in ("verdict", "sub_reason", "reasons", "hint")}
    print(f"\nstatus: {json.dumps(said, indent=1)}")
    assert held, status["reasons"]
    assert "val_check_interval" in status["hint"] and "num_workers" not in status["hint"]
    delta = {k: b.get(k, 0.0) - a.get(k, 0.0) for k in b}
    booked = delta["evaluation"] / sum(delta.values())
    print(
        f"validating {truth:.1%} of [{t1:.1f}, {t2:.1f}] by the job's log, booked as evaluation {booked:.1%}"
    )
    assert 0.2 <= truth <= 0.7, truth  # the job is what it says: validation holds a share worth naming
    assert abs(booked - truth) <= 0.1, (booked, truth, delta)
    assert delta["productive"] / sum(delta.values()) <= 1.0 - truth + 0.1  # not booked as work


def test_the_torch_helpers_saves_are_told_as_checkpoint_spans(tmp_path, monkeypatch) -> None:
    """``DistributedCheckpoint.routine`` (a save on the loop's own schedule) and ``checkpoint`` (the
    agent's request) each tell a checkpoint span as long as the save held the loop, and the routine
    one a saved note with that duration (one process, no process group: its barrier is a no-op)."""
    import torch.distributed  # noqa: F401  (imported by any job that saves: not inside its first span)
    from tna_client.torch_dist import DistributedCheckpoint

    guard = _guard(tmp_path, monkeypatch)
    ckpt = DistributedCheckpoint(guard=guard)
    report = tmp_path / f"steps-{os.getpid()}.json"

    def save(name: str, seconds: float):
        def write() -> str:
            time.sleep(seconds)
            (tmp_path / name).write_bytes(b"state")
            return str(tmp_path / name)

        return write

    assert ckpt.routine(10, save("step-10.pt", 0.15)) == str(tmp_path / "step-10.pt")
    body = json.loads(report.read_text())
    ((kind, a, b),) = body["recent"]
    assert kind == "checkpoint" and 0.14 <= b - a <= 0.6, body["recent"]
    assert body["spans"]["checkpoint"]["count"] == 1 and body["spans"]["checkpoint"]["seconds"] >= 0.14
    notes = [json.loads(p.read_text()) for p in tmp_path.glob("saved-*.json")]
    assert [(n["step"], n["path"]) for n in notes] == [(10, str(tmp_path / "step-10.pt"))], notes
    ckpt.checkpoint(11, save("step-11.pt", 0.05))
    body = json.loads(report.read_text())
    assert (
        body["spans"]["checkpoint"]["count"] == 2 and [k for k, _, _ in body["recent"]] == ["checkpoint"] * 2
    )
    said = parse_said(report.read_bytes())
    assert said is not None and said.totals[CP][0] == 2
    ckpt.close()
