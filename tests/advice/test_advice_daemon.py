"""The advice of a real daemon over eight fake H100s at work: a line in ``status``, the ``advise``
command (text and JSON) over the control socket, and /api/v1/advice on the TCP port behind the same
basic auth as /api/v1/status."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gpu"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "exporter"))
from gpu_fixtures import fake_nvml, fake_nvml_library, nvml_env  # noqa: F401
from webtls import basic, bcrypt_hash

from agent.devtools.fake_nvml import FakeNvml

GIB = 2**30
PASSWORD = "advice-pass"
KEYS = {"instance", "binds", "lines", "candidates", "assumptions", "job", "made_at"}


def test_the_daemon_advises_in_status_the_cli_and_behind_the_status_auth(
    agent_factory, fake_nvml: FakeNvml, nvml_env, tmp_path: Path
) -> None:
    for i in range(8):  # at work: busy SMs, tensor ahead of DRAM, 40 GiB of 80 held, this process on it
        fake_nvml.set(
            i,
            utilization_gpu=97,
            power_mw=650_000,
            sm_active=82.0,
            tensor_active=45.0,
            dram_active=35.0,
            memory_used_bytes=40 * GIB,
            processes=[{"pid": os.getpid(), "used_memory_bytes": 40 * GIB}],
        )
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  ops: '{bcrypt_hash(PASSWORD)}'\n")
    agent = agent_factory(
        {
            "http": {"web_config": str(web)},
            "cost": {"currency": "USD", "instance_hour_price": 80.0},
            "advice": {"clouds": ["aws", "gcp"], "prices": {"p5.48xlarge": 55.0, "a3-highgpu-8g": 88.0}},
        },
        env=nvml_env,
        start=False,
    ).start(wait=False)  # /healthz is behind the password too: ready is the control socket answering

    def advice_binds() -> dict | None:
        with contextlib.suppress(OSError, AssertionError):
            s = agent.status()
            return s if s.get("advice", {}).get("advice", {}).get("binds") == "gpu" else None
        return None

    st = agent.wait_for(
        advice_binds,
        timeout=60,
        what="the advice to see the GPUs compute",
    )
    a = st["advice"]["advice"]
    assert set(a) == KEYS
    assert a["instance"]["card"] == "H100-SXM" and a["instance"]["gpus"] == 8
    assert a["lines"][0].startswith("its GPUs compute") and "of 80 GB" in a["lines"][0]
    assert st["advice"]["lines"] == [f"advice: {a['lines'][0]}; {a['lines'][1]}"]
    by_id = {c["instance"]: c for c in a["candidates"]}
    assert {c["cloud"] for c in a["candidates"]} == {"aws", "gcp"}
    # the same card at ~0.69x the price per GPU-hour: the cheapest per unit of work, first
    assert a["candidates"][0]["instance"] == "p5.48xlarge"
    assert by_id["p5.48xlarge"]["price_ratio"] == 0.6875
    assert "g6.48xlarge" in by_id and "cannot hold" in by_id["g6.48xlarge"]["excluded"]  # 24 GB < 43 GB

    shown = run_cli("status", "--config", str(agent.config_path))
    assert shown.returncode == 0 and "advice: its GPUs compute" in shown.stdout, shown.stdout + shown.stderr
    text = run_cli("advise", "--config", str(agent.config_path))
    assert text.returncode == 0, text.stderr
    assert "gpu binds" in text.stdout and "p5.48xlarge" in text.stdout and "resting on:" in text.stdout
    raw = run_cli("advise", "--json", "--since", "1h", "--config", str(agent.config_path))
    assert raw.returncode == 0 and set(json.loads(raw.stdout)) == KEYS
    bad = run_cli("advise", "--since", "30d", "--config", str(agent.config_path))
    assert bad.returncode == 1 and "since must be between 0 and" in bad.stderr

    code, _ = agent.get("/api/v1/advice")
    assert code == 401  # the status's rules: no password, no advice
    code, body = agent.get("/api/v1/advice", headers=basic("ops", PASSWORD))
    assert code == 200 and set(json.loads(body)) == KEYS
    code, body = agent.get("/api/v1/advice?job=nosuch", headers=basic("ops", PASSWORD))
    assert code == 200 and json.loads(body)["job"] == "nosuch" and json.loads(body)["binds"] == "unknown"


def test_a_job_that_ends_keeps_its_advice_in_the_ledger_s_record(
    agent_factory, fake_nvml: FakeNvml, nvml_env, tmp_path: Path
) -> None:
    # a trainer in Slurm job 4127 (its environment says so, as slurmstepd leaves it) on every GPU
    trainer = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], env={**os.environ, "SLURM_JOB_ID": "4127"}
    )
    try:
        for i in range(8):
            fake_nvml.set(
                i,
                utilization_gpu=97,
                power_mw=650_000,
                sm_active=82.0,
                tensor_active=45.0,
                dram_active=35.0,
                memory_used_bytes=30 * GIB,
                processes=[{"pid": trainer.pid, "used_memory_bytes": 30 * GIB}],
            )
        agent = agent_factory({"jobs": {"scontrol": str(tmp_path / "no-scontrol")}}, env=nvml_env)
        agent.wait_for(
            lambda: (
                agent.status().get("advice", {}).get("advice", {}).get("job") == "4127"
                and agent.status()["advice"]["advice"]["binds"] == "gpu"
            ),
            timeout=60,
            what="the advice of job 4127",
        )
        for i in range(8):  # the job ends: its process leaves the GPUs
            fake_nvml.set(i, utilization_gpu=0, power_mw=70_000, sm_active=0.0, processes=[])
    finally:
        trainer.kill()
        trainer.wait()

    def job_record() -> dict | None:
        done = run_cli("report", "--by", "job", "--json", "--config", str(agent.config_path))
        jobs = json.loads(done.stdout)["jobs"] if done.returncode == 0 else []
        return next((j for j in jobs if j["job_id"] == "4127" and j.get("advice")), None)

    record = agent.wait_for(job_record, timeout=30, what="job 4127's advice in its ledger record")
    assert record["advice"]["binds"] == "gpu"
    assert record["advice"]["lines"][0].startswith("its GPUs compute")
    assert "advice for an ended job" in agent.log()
    # and on the bus, for the chat channels that take goodput messages (rendered: tests/alerts)
    ended = [e for e in agent.status()["recent_events"] if e["type"] == "job_advice"]
    assert [(e["job"], e["binds"]) for e in ended] == [("4127", "gpu")] and ended[0]["lines"] == record[
        "advice"
    ]["lines"]
    text = run_cli("report", "--by", "job", "--config", str(agent.config_path)).stdout
    assert "    advice: its GPUs compute" in text
