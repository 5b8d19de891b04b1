"""Which job is on the GPUs, against the real scheduler: an `sbatch` job on the private one-node
cluster (tests/slurm/cluster.py) runs a process that the fake NVML lists on GPU 0. The agent, run
as the daemon tests run it (the fake on LD_LIBRARY_PATH), maps it to its job id, name and user in
the status, `training_node_job_info` and `training_node_gpu_job_info`, and `report --by job` books
GPU 0's and GPU 1's seconds to the job and GPU 2's (nothing on it) to `no job`.

slurmd tracks the job with proctrack/linuxproc here (no job cgroup), so the batch script is found
through its SLURM_JOB_ID (the agent runs as root), a second process of the job with an empty
environment (on GPU 1) through slurmd's `scontrol listpids`, and the job is named by slurmctld's
`scontrol show job`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from cluster import SlurmCluster, slurm_cluster  # noqa: F401  (the fixture)
from conftest import REPO

from agent.devtools.fake_nvml import FakeNvml, library_dir


def _report(agent, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", "report", "--control-socket", agent.control_socket, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_slurm_job_is_named_on_its_gpu_in_status_metrics_and_the_ledger(
    slurm_cluster: SlurmCluster,  # noqa: F811
    agent_factory,
    tmp_path: Path,
) -> None:
    c = slurm_cluster
    pid_file, bare_file = c.dir / "job.pid", c.dir / "bare.pid"
    # the batch script becomes the trainer: its pid (kept through exec) and SLURM_* environment; a
    # second process of the job runs with an empty environment, so only slurmd's listpids places it
    script = f"env -i sleep 300 & echo $! > {bare_file}; echo $$ > {pid_file}; exec sleep 300"
    job = c.sbatch("--job-name=llama-7b", "-o", "/dev/null", "--wrap", script)
    c.wait_until(lambda: c.jobs().get(job) == "RUNNING" and pid_file.exists(), 30, "job running")
    c.wait_until(lambda: pid_file.read_text().strip() and bare_file.read_text().strip(), 10, "the pids")
    pid, bare = int(pid_file.read_text()), int(bare_file.read_text())

    fake = FakeNvml(tmp_path / "nvml.json", gpus=3)
    for gpu, p in ((0, pid), (1, bare)):
        fake.set(
            gpu,
            processes=[{"pid": p, "used_memory_bytes": 1 << 30}],
            utilization_gpu=97,
            sm_active=90,
            power_mw=600_000,
            power_limit_mw=700_000,
        )
    agent = agent_factory(
        {"jobs": {"node_name": c.node, "timeout": "5s"}, "goodput": {"resolution": "1s"}},
        env={
            "SLURM_CONF": str(c.conf),
            "LD_LIBRARY_PATH": str(library_dir()),
            "FAKE_NVML_STATE": str(fake.path),
        },
    )

    def named():
        jobs = (agent.status().get("snapshot") or {}).get("jobs") or []
        return next((j for j in jobs if j["job_id"] == str(job) and j["name"] and bare in j["pids"]), None)

    seen = agent.wait_for(named, timeout=30, what="the job named in the status, both its processes placed")
    assert seen["name"] == "llama-7b" and seen["user"] == "root"  # what slurmctld says
    assert seen["scheduler"] == "slurm" and seen["source"] == "environ"  # linuxproc: no job cgroup
    assert set(seen["pids"]) == {pid, bare}  # bare: no SLURM_JOB_ID, placed by scontrol listpids

    info = f'training_node_job_info{{job_id="{job}",job_name="llama-7b",scheduler="slurm",user="root"}} 1.0'
    on_gpus = [f'training_node_gpu_job_info{{gpu="{i}",job_id="{job}"}} 1.0' for i in (0, 1)]

    def exposed() -> str | None:
        m = agent.metrics()
        return m if info in m and all(g in m for g in on_gpus) else None

    text = agent.wait_for(exposed, 15, what="the info series")
    assert 'training_node_gpu_job_info{gpu="2"' not in text  # nothing runs on GPU 2
    # the job label is on the two info series only
    labelled = {
        line.split("{")[0] for line in text.splitlines() if "job_id=" in line and not line.startswith("#")
    }
    assert labelled == {"training_node_job_info", "training_node_gpu_job_info"}
    promtool = shutil.which("promtool")
    if promtool is not None:  # installed with prometheus (.ci/apt-packages)
        lint = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
        )
        assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), (
            lint.stdout + lint.stderr
        )

    def booked():
        g = json.loads(_report(agent, "--json", "--since", "1h").stdout or "{}")
        by = {e["job_id"]: e for e in g.get("jobs") or []}
        if (
            by.get(str(job), {}).get("gpu_seconds", 0) >= 2
            and by.get("no-job", {}).get("gpu_seconds", 0) >= 2
        ):
            return g, by
        return None

    g, by = agent.wait_for(booked, timeout=30, what="GPU-seconds booked to the job and to no job")
    # the jobs' GPU-seconds and no-job's are the node's, and each GPU went to one of them
    assert abs(sum(e["gpu_seconds"] for e in by.values()) - g["gpu_seconds"]) < 0.01
    assert set(by) == {str(job), "no-job"}
    # GPU 2's idle seconds are the node's no-job bucket, all of it no job's (no-job's entry may also
    # hold GPU 0's first tick, before the jobs source had placed a process NVML had just listed)
    assert by["no-job"]["buckets"]["no-job"] == g["buckets"]["no-job"] > 0
    assert by[str(job)]["buckets"]["no-job"] == 0

    out = _report(agent, "--by", "job", "--since", "1h")
    assert out.returncode == 0, out.stderr
    assert re.search(rf"^  job {job} `llama-7b` \(root\): \d+\.\d{{3}} GPU-h, goodput", out.stdout, re.M), (
        out.stdout
    )
    assert re.search(r"^  no job: \d+\.\d{3} GPU-h", out.stdout, re.M), out.stdout


def test_an_array_task_with_spaces_in_its_name_is_its_own_job(
    slurm_cluster: SlurmCluster,  # noqa: F811
    agent_factory,
    tmp_path: Path,
) -> None:
    """A shape the first test does not draw: an array task (its own job id beside the array's) whose
    name holds spaces, which the one-line ``scontrol show job -o`` output does not quote."""
    c = slurm_cluster
    pid_file = c.dir / "task.pid"
    parent = c.sbatch(
        "--array=3-3",
        "--job-name=fine tune 7b",
        "-o",
        "/dev/null",
        "--wrap",
        f"echo $$ > {pid_file}; exec sleep 300",
    )
    c.wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 30, "the array task running")
    pid = int(pid_file.read_text())
    fake = FakeNvml(tmp_path / "nvml.json", gpus=1)
    fake.set(0, processes=[{"pid": pid, "used_memory_bytes": 1 << 30}], utilization_gpu=97, sm_active=90)
    agent = agent_factory(
        {"jobs": {"node_name": c.node, "timeout": "5s"}},
        env={
            "SLURM_CONF": str(c.conf),
            "LD_LIBRARY_PATH": str(library_dir()),
            "FAKE_NVML_STATE": str(fake.path),
        },
    )

    def named():
        jobs = (agent.status().get("snapshot") or {}).get("jobs") or []
        return next((j for j in jobs if pid in j["pids"] and j["name"]), None)

    seen = agent.wait_for(named, timeout=30, what="the array task named in the status")
    assert seen["name"] == "fine tune 7b" and seen["user"] == "root", seen
    assert seen["array_job_id"] == str(parent) and seen["array_task_id"] == "3", seen
    # the task's own job id, as slurmctld gives it (for a one-task array it may equal the array's)
    assert c.job_field(int(seen["job_id"]), "ArrayTaskId") == "3"
    info = agent.wait_for(
        lambda: next(
            (ln for ln in agent.metrics().splitlines() if ln.startswith("training_node_job_info{")), None
        ),
        15,
        what="the info series",
    )
    assert 'job_name="fine tune 7b"' in info and f'job_id="{seen["job_id"]}"' in info
