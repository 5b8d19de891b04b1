"""bench/real_gpu.py (issue 33) run here, against the fake NVML, so that its own bugs are found before a
GPU machine's minutes are spent on it: every stage ends with a status, the CUDA stages skip with their
reason, the NVML probe records each call's value or error, and the budget is a hard limit. Then the
fixture checker (bench/real_gpu_fixture.py), and the trainer and agent helpers of the CUDA stages,
run on this machine's CPU and the fake. No recording of a real GPU exists yet: the checker's test
uses recordings made against the fake."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpu_fixtures import fake_nvml_library  # noqa: F401
from other_user import closed_to

from agent.devtools.fake_nvml import device, state, write_state

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "real_gpu.py"
FIXTURE = REPO / "bench" / "real_gpu_fixture.py"
sys.path.insert(0, str(REPO / "bench"))

STAGES = (
    "environment",
    "nvml_probe",
    "nvml_probe_unprivileged",
    "duty_cycles",
    "spin",
    "agent_training",
    "agent_cost",
)
CUDA_STAGES = ("duty_cycles", "spin", "agent_training", "agent_cost")
NO_CUDA = ("torch.cuda.is_available() is False", "no CUDA: torch not importable")
MISSING = "nvmlDeviceGetTotalEccErrors"  # a function this "driver" lacks
UNSUPPORTED = "nvmlDeviceGetPowerUsage"  # a call this GPU refuses


@pytest.fixture(scope="module")
def fake_h200(fake_nvml_library: Path) -> Iterator[dict[str, str]]:
    """One H200 lacking one function and refusing one call, in a folder that nobody may read (the
    probe runs again as nobody); the environment a run needs to see it. The fake library is copied
    there where nobody cannot reach it in the checkout (a clone in a 0700 folder), as the script
    copies itself and pynvml for nobody."""
    work = Path(tempfile.mkdtemp(prefix="tna-real-gpu-"))
    os.chmod(work, 0o755)
    path = work / "nvml.json"
    write_state(
        path, state([device(0, name="NVIDIA H200", unsupported=[UNSUPPORTED])], missing_functions=[MISSING])
    )
    os.chmod(path, 0o644)
    library = fake_nvml_library
    nobody = pwd.getpwnam("nobody")
    if closed_to(nobody.pw_uid, nobody.pw_gid, library) is not None:
        (work / "lib").mkdir(mode=0o755)
        library = Path(shutil.copy2(library, work / "lib" / library.name))
        os.chmod(library, 0o755)
    yield {
        **os.environ,
        "LD_LIBRARY_PATH": str(library.parent),
        "FAKE_NVML_STATE": str(path),
        "TNA_TEST_WORK": str(work),
    }
    shutil.rmtree(work, ignore_errors=True)


def run_script(
    env: dict[str, str], out: Path, *args: str, timeout: float = 120
) -> tuple[dict[str, Any], float]:
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    wall = time.monotonic() - t0
    assert done.returncode in (0, 3), f"exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return json.loads((out / "real_gpu.json").read_text()), wall


@pytest.fixture(scope="module")
def recording(fake_h200: dict[str, str]) -> tuple[Path, dict[str, Any]]:
    """A whole run against the fake: ends when the work does, far inside its budget."""
    out = Path(fake_h200["TNA_TEST_WORK"]) / "out"
    data, _ = run_script(fake_h200, out, "--budget-seconds", "240", "--nvml-seconds", "1")
    return out, data


def answer(result: dict[str, Any], *path: str) -> dict[str, Any]:
    node: Any = result["gpus"]["0"]
    for key in path:
        node = node[key]
    return node


def test_every_stage_ends_with_a_status_and_the_cuda_stages_say_why_they_skipped(
    recording: tuple[Path, dict[str, Any]],
) -> None:
    out, data = recording
    assert data["finished"] is True and data["ended_by"] == "done"
    assert list(data["stages"]) == list(STAGES)
    for name, stage in data["stages"].items():
        assert stage["status"] in ("ok", "skipped", "failed"), name
        if stage["status"] == "skipped":
            assert stage["reason"], name
        if stage["status"] == "failed":
            assert stage["error"], name
    assert data["stages"]["environment"]["status"] == "ok", data["stages"]["environment"]
    for name in CUDA_STAGES:
        stage = data["stages"][name]
        assert stage["status"] == "skipped", (name, stage)
        assert stage["reason"].startswith(NO_CUDA), stage["reason"]
    log = (out / "real_gpu.log").read_text()
    for name in STAGES:
        assert f"[run] {name}: " in log, name
    assert "[nvml_probe] started as uid" in log


def test_the_probe_records_values_where_the_fake_answers_and_errors_where_it_cannot(
    recording: tuple[Path, dict[str, Any]],
) -> None:
    _, data = recording
    probe = data["stages"]["nvml_probe"]
    assert probe["status"] == "ok", probe
    result = probe["result"]
    assert result["nvmlInit"]["error"] is None
    assert result["system"]["nvmlSystemGetDriverVersion"]["value"]
    name = answer(result, "agent_calls", "nvmlDeviceGetName")
    assert name["value"] == "NVIDIA H200" and name["error"] is None
    util = answer(result, "agent_calls", "nvmlDeviceGetUtilizationRates")
    assert util["error"] is None and set(util["value"]) >= {"gpu", "memory"}
    # what the fake lacks is an answer, not a crash
    assert answer(result, "agent_calls", MISSING)["error"]["name"] == "NVML_ERROR_FUNCTION_NOT_FOUND"
    assert answer(result, "agent_calls", UNSUPPORTED)["error"]["name"] == "NVML_ERROR_NOT_SUPPORTED"
    fields = answer(result, "agent_calls", "nvmlDeviceGetFieldValues")
    assert fields["197@0x0"]["error"] is None and fields["138@0xffffffff"]["error"] is None
    assert answer(result, "agent_calls", "nvmlEventSetWait(100ms)")["error"]["name"] == "NVML_ERROR_TIMEOUT"
    # every call asked for the next issues has an answer of some kind, link by link for NVLink
    soon = answer(result, "soon_calls")
    assert len(soon["nvmlDeviceGetNvLinkState"]) == 18
    for name, got in soon.items():
        assert "error" in got or all("error" in v for v in got.values()), name
    # the timed parts ran, or say why not
    for part in ("gpm_intervals", "samples", "power_side_by_side"):
        assert part in result, part
    assert set(result["gpm_intervals"]) == {"50ms", "100ms", "200ms"}
    assert result["power_side_by_side"]["rows"], result["power_side_by_side"]


def test_the_probe_runs_again_as_nobody(recording: tuple[Path, dict[str, Any]]) -> None:
    _, data = recording
    stage = data["stages"]["nvml_probe_unprivileged"]
    if os.geteuid() != 0:
        assert stage["status"] == "skipped" and "not root" in stage["reason"]
        return
    assert stage["status"] == "ok", stage
    assert stage["result"]["identity"]["user"] == "nobody"
    assert stage["result"]["identity"]["uid"] != 0
    assert answer(stage["result"], "agent_calls", "nvmlDeviceGetName")["value"] == "NVIDIA H200"


def test_the_budget_is_a_hard_limit(fake_h200: dict[str, str]) -> None:
    """A budget too small for any stage: the run still ends within it (and a little for Python to
    start and stop), every stage named with a status."""
    out = Path(fake_h200["TNA_TEST_WORK"]) / "tiny"
    budget = 3.0
    data, wall = run_script(fake_h200, out, "--budget-seconds", str(budget), timeout=30)
    assert wall < budget + 3.0, wall
    assert data["wall_seconds"] <= budget + 0.5
    assert set(data["stages"]) == set(STAGES)
    assert all(s["status"] in ("ok", "skipped", "failed") for s in data["stages"].values())
    assert (out / "real_gpu.log").exists()


def test_a_run_told_to_stop_ends_the_stage_under_way_and_keeps_what_it_had(
    fake_h200: dict[str, str], tmp_path: Path
) -> None:
    """SIGTERM (the watchdog's path too): the stage in a slow driver call is ended with its process
    group, its partial result kept; the stages not reached say so."""
    slow = tmp_path / "slow.json"
    write_state(slow, state([device(0, name="NVIDIA H200", delay_ms=2000)]))
    out = tmp_path / "out"
    cmd = [sys.executable, str(SCRIPT), str(out), "--budget-seconds", "60", "--stages", "nvml_probe,spin"]
    proc = subprocess.Popen(
        cmd,
        env={**fake_h200, "FAKE_NVML_STATE": str(slow)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while "[nvml_probe] started" not in _read(out / "real_gpu.log") and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        proc.terminate()
        assert proc.wait(10) == 3
    finally:
        proc.kill()
    data = json.loads((out / "real_gpu.json").read_text())
    assert data["finished"] is False and data["ended_by"] == "signal 15"
    probe = data["stages"]["nvml_probe"]
    assert probe["status"] == "failed" and "ended (signal 15)" in probe["error"]
    assert probe["result"]["nvmlInit"]["error"] is None  # what it had before the slow calls
    assert data["stages"]["spin"]["status"] == "skipped"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def test_the_fixture_checker_names_what_the_fake_answers_otherwise(
    recording: tuple[Path, dict[str, Any]], fake_h200: dict[str, str], tmp_path: Path
) -> None:
    """The recording was made on an H200 lacking one function and refusing one call: against the
    fake's plain H200 exactly those differ. Then the fake's own answers, taken for a recording, differ
    in nothing, until one sample clock is changed."""
    out, _ = recording
    profile = tmp_path / "profile.json"
    done = subprocess.run(
        [sys.executable, str(FIXTURE), str(out / "real_gpu.json"), "--save-profile", str(profile)],
        env=fake_h200,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    diffs = [line for line in done.stdout.splitlines() if line.startswith("DIFF ")]
    assert any(MISSING in d and "NVML_ERROR_FUNCTION_NOT_FOUND" in d for d in diffs), diffs
    assert any(UNSUPPORTED in d and "NVML_ERROR_NOT_SUPPORTED" in d for d in diffs), diffs
    assert not any("nvmlDeviceGetName" in d for d in diffs), diffs
    assert "note: the power and utilization step: not in the recording" in done.stdout

    fake = json.loads(profile.read_text())
    assert fake["step"]["usage_mw"]["rise_90_s"] is not None
    itself = tmp_path / "itself.json"
    itself.write_text(json.dumps({"stages": fake["stages"]}))
    same = subprocess.run(
        [sys.executable, str(FIXTURE), str(itself), "--profile", str(profile)], capture_output=True, text=True
    )
    assert same.returncode == 0 and "0 differences" in same.stdout, same.stdout + same.stderr

    samples = fake["stages"]["nvml_probe"]["result"]["samples"]
    kind = next((k for k, v in samples.items() if "clock" in v), None)
    if kind is None:
        pytest.skip("this fake keeps no sample buffer: no clock to change")
    samples[kind]["clock"]["closest"] = (
        "monotonic" if samples[kind]["clock"]["closest"] != "monotonic" else "boottime"
    )
    itself.write_text(json.dumps({"stages": fake["stages"]}))
    changed = subprocess.run(
        [sys.executable, str(FIXTURE), str(itself), "--profile", str(profile)], capture_output=True, text=True
    )
    assert changed.returncode == 1, changed.stdout
    assert f"nvml_probe samples {kind} clock" in changed.stdout


def test_the_poller_keeps_each_reading_of_the_fake_while_a_workload_would_run(
    fake_nvml_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CUDA stages' NVML side, on the fake: power, GPM windows and utilization kept in a thread,
    and a span's means cut out of them."""
    import pynvml
    from realgpu.nvml_timing import Poller

    from agent.sources.gpu.binding import load_library

    path = tmp_path / "nvml.json"
    write_state(path, state([device(0, name="NVIDIA H200", utilization_gpu=40, sm_active=30.0)]))
    monkeypatch.setenv("FAKE_NVML_STATE", str(path))
    load_library(str(fake_nvml_library))
    pynvml.nvmlInit()
    try:
        with Poller(pynvml.nvmlDeviceGetHandleByIndex(0)) as poll:
            t0 = time.monotonic()
            time.sleep(1.3)
            t1 = time.monotonic()
    finally:
        pynvml.nvmlShutdown()
    span = poll.between(t0, t1)
    assert poll.errors == {}
    assert len(poll.power) >= 8 and len(poll.gpm) >= 4 and len(poll.util) >= 1
    assert span["utilization_1hz"]["mean"] == 40
    assert span["gpm_200ms"]["sm_util"] == pytest.approx(30.0)
    assert span["power"]["usage_mw"] > 0


def test_the_trainer_makes_steps_each_way_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA stages' trainer, on this machine's CPU: the same code paths (batches made on the
    device, JPEGs decoded in the main process, a synchronous checkpoint), a few steps each."""
    pytest.importorskip("torch")
    from realgpu import trainer

    monkeypatch.setattr(trainer, "CHECKPOINT_EVERY", 0.1)
    for mode in trainer.MODES:
        report = tmp_path / f"{mode}.jsonl"
        summary = trainer.train(mode, 0.4, report, device="cpu", scratch=tmp_path)
        assert summary["steps"] > 0, summary
        rows = trainer.read_report(report)
        assert rows[0]["event"] == "start"
        assert sum(1 for r in rows if "end" in r) == summary["steps"]
        if mode == "input":
            assert summary["inputs"] in ("pil-jpeg", "zlib-stand-in")
        if mode == "checkpoint":
            assert summary["saves_s"], summary
    assert not list(tmp_path.glob("checkpoint-*.pt"))  # the trainer leaves no checkpoint behind


@pytest.mark.serial  # the stage runs a CPU trainer under its deadline: side by side it overran
def test_the_agent_stage_watches_the_installed_agent_judge_a_trainer(
    fake_h200: dict[str, str], tmp_path: Path
) -> None:
    """The agent stage's code on the fake and this machine's CPU: the installed agent at default
    settings answers its status on loopback while the stage's trainer (a process of its own) trains;
    the timeline, the changes and the trainer's steps are put together; the agent is stopped and
    continued, and ends cleanly."""
    pytest.importorskip("torch")
    from realgpu.agent_run import Agent
    from realgpu.agent_stages import watch
    from realgpu.record import Partial

    env = {k: fake_h200[k] for k in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE")}
    agent = Agent(tmp_path, env=env)
    ctx = Partial(tmp_path / "partial.json", "test", time.monotonic() + 120)
    try:
        assert agent.start() < 30
        got = watch(
            ctx, agent, "checkpoint", "compute", 14.0, tmp_path, tmp_path, device="cpu", trainer_start=9.0
        )
        agent.pause()
        assert agent.paused
        agent.resume()
        assert agent.status()["snapshot"]["collectors"]["gpu"]["success"] in (True, None)
        assert agent.cpu_seconds() is not None
    finally:
        code = agent.stop()
    assert code == 0, agent.tail(30)
    assert got["trainer_exit"] == 0, got["trainer_output_tail"]
    assert got["trainer"]["steps"] > 0 and got["trainer"]["saves_s"], got["trainer"]
    assert got["first_step_s"] is not None
    assert got["timeline"] and all("label" in row or "error" in row for row in got["timeline"])
    assert got["changes"] and "reasons" in got["changes"][0]
    assert got["expected"] == "compute"
