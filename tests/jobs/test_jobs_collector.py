"""The jobs source on this box's real /proc: a process carrying a Slurm job's environment is placed
in its job, one without is in none, and scontrol missing or failing (the real one, with no config
to read) never holds up a tick: the job is shown by what the process says, the failure is said once
and waited out by the backoff, not retried every tick."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import wait_until

from agent.core.vocabulary import SchedulerKind
from agent.sources.jobs.collector import JobCollector
from agent.sources.jobs.part import JobSource
from agent.sources.jobs.scontrol import JobLookup

SLURM_ENV = {
    "SLURM_JOB_ID": "4127",
    "SLURM_JOB_NAME": "llama-7b",
    "SLURM_JOB_USER": "alice",
    "SLURM_STEP_ID": "0",
    "SLURM_ARRAY_JOB_ID": "4120",
    "SLURM_ARRAY_TASK_ID": "7",
}


@pytest.fixture
def trainer() -> Iterator[subprocess.Popen[bytes]]:
    """A process with a Slurm job's environment (as slurmstepd leaves it to its tasks)."""
    p = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, **SLURM_ENV}
    )
    yield p
    p.kill()
    p.wait()


def _collector(pids: list[int], program: str) -> JobCollector:
    return JobCollector("/proc", lambda: pids, JobLookup(program, timeout=5.0, refresh=60.0, max_jobs=8))


def _timed(c: JobCollector):
    t0 = time.monotonic()
    part = c.collect()
    return part, time.monotonic() - t0


def test_a_process_is_placed_from_its_environment_when_scontrol_is_missing(trainer, tmp_path: Path):
    c = _collector([trainer.pid, 2**22 + 17], str(tmp_path / "no-scontrol"))  # the second pid is no process
    try:
        part, took = _timed(c)
        assert took < 1.0
        assert part.scheduler == SchedulerKind.SLURM  # a process in a job says there is a scheduler
        assert part.pids == {trainer.pid: "4127"}
        (job,) = part.jobs
        assert job.source == JobSource.ENVIRON
        assert (job.job_id, job.name, job.user, job.step, job.array) == (
            "4127",
            "llama-7b",
            "alice",
            "0",
            "4120_7",
        )
        assert job.describe() == "job 4127 [4120_7] `llama-7b` (alice)"
        # the lookup failed in the background: said in the part, the job still shown by what it said
        part = wait_until(lambda: (p := c.collect()).problem and p, 10, what="the missing scontrol said")
        assert part.problem is not None and "not found" in part.problem
        assert part.jobs[0].name == "llama-7b"
    finally:
        c.close()


def test_a_process_outside_any_job_is_in_none(tmp_path: Path):
    me = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_")},
    )
    c = _collector([me.pid], str(tmp_path / "no-scontrol"))
    try:
        part = c.collect()
        assert part.jobs == () and part.pids == {}
        assert part.scheduler is None and part.problem is None  # no Slurm here, nothing to complain about
    finally:
        c.close()
        me.kill()
        me.wait()


def test_a_failing_scontrol_is_waited_out_and_never_holds_up_a_tick(trainer, tmp_path: Path, monkeypatch):
    real = shutil.which("scontrol")
    if real is None:
        pytest.skip("scontrol not installed (Debian package slurm-client, in .ci/apt-packages)")
    # the real scontrol with no config it can read: it looks for a config server (DNS SRV) and then
    # fails ("Could not establish a configuration source"), or hangs past the time limit doing so
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "absent" / "slurm.conf"))
    c = JobCollector("/proc", lambda: [trainer.pid], JobLookup(real, timeout=1.0, refresh=60.0, max_jobs=8))
    try:
        part = wait_until(lambda: (p := c.collect()).problem and p, 20, what="scontrol's failure said")
        assert part.problem is not None
        assert "exit 1" in part.problem or "did not answer in 1s" in part.problem, part.problem
        assert part.jobs[0].job_id == "4127" and part.jobs[0].name == "llama-7b"  # from the environment
        failed = part.lookups_failed_total
        worst = 0.0
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:  # ticks keep coming at once while it fails
            _, took = _timed(c)
            worst = max(worst, took)
            time.sleep(0.05)
        assert worst < 0.5
        # the backoff (from 1 s, doubling) waits between tries: a couple more in 1.5 s, not one a tick
        assert c.collect().lookups_failed_total - failed <= 2
    finally:
        c.close()
