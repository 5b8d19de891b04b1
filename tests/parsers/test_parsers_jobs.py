"""The jobs source's parsers on what Slurm really writes: cgroup paths of its v1 and v2 plugins,
a batch job's environment, and `scontrol listpids` / `scontrol show job -o` as a real slurmctld and
slurmd printed them (tests/fixtures/slurm, captured on this box)."""

from __future__ import annotations

import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.sources.jobs.parse import (
    MAX_FIELD,
    job_from_cgroup_path,
    job_from_environ,
    job_from_proc_cgroup,
    pairs,
    parse_listpids,
    parse_show_job,
)

SLURM = REPO / "tests" / "fixtures" / "slurm"

# /proc/<pid>/cgroup of a task under Slurm's cgroup/v2 plugin (slurm.schedmd.com/cgroup_v2.html:
# slurmstepd's scope, job_<id>/step_<id>/user/task_<n>)
V2_TASK = "0::/system.slice/slurmstepd.scope/job_4127/step_0/user/task_0\n"
# the batch script: step_batch, then the "slurm" leaf beside "user"
V2_BATCH = "0::/system.slice/slurmstepd.scope/job_4127/step_batch/slurm\n"
# Debian's slurm is built with --enable-multiple-slurmd: the scope carries the node name
V2_MULTI = "0::/system.slice/cn-17_slurmstepd.scope/job_88/step_extern/slurm\n"
# cgroup v1 (task/cgroup, proctrack/cgroup): every controller under /slurm/uid_<uid>/job_<id>/step_<id>
V1 = (
    "12:pids:/slurm/uid_1000/job_4127/step_0/task_1\n"
    "11:memory:/slurm/uid_1000/job_4127/step_0/task_1\n"
    "10:freezer:/slurm/uid_1000/job_4127/step_0\n"
    "9:devices:/slurm/uid_1000/job_4127/step_0/task_1\n"
    "4:cpu,cpuacct:/\n"
    "1:name=systemd:/system.slice/slurmd.service\n"
    "0::/system.slice/slurmd.service\n"
)
V1_MULTI = "7:cpuset:/slurm_cn-17/uid_0/job_12/step_batch\n"
# this very box's processes under proctrack/linuxproc: no Slurm in the path at all
LINUXPROC = "9:name=systemd:/\n4:memory:/process_api/21e883e11f85450ed52845fa8b45e47f\n0::/\n"
NOT_SLURM = "0::/user.slice/user-1000.slice/session-3.scope\n"


@pytest.mark.parametrize(
    ("text", "job", "step", "uid"),
    [
        (V2_TASK, "4127", "0", None),
        (V2_BATCH, "4127", "batch", None),
        (V2_MULTI, "88", "extern", None),
        (V1, "4127", "0", 1000),
        (V1_MULTI, "12", "batch", 0),
    ],
)
def test_the_job_is_read_from_slurms_cgroup_layouts(text: str, job: str, step: str, uid: int | None):
    p = job_from_proc_cgroup(text)
    assert p.malformed == 0
    assert p.value is not None
    assert (p.value.job_id, p.value.step, p.value.uid) == (job, step, uid)


@pytest.mark.parametrize("text", [LINUXPROC, NOT_SLURM, "", "0::/job_12/step_0\n"])
def test_a_path_outside_slurm_names_no_job(text: str):
    assert job_from_proc_cgroup(text).value is None


def test_a_job_folder_without_a_step_is_the_job():
    j = job_from_cgroup_path("/system.slice/slurmstepd.scope/job_5")
    assert j is not None and (j.job_id, j.step) == ("5", None)
    assert job_from_cgroup_path("/system.slice/slurmstepd.scope/job_5x/step_0") is None


def test_the_batch_environment_names_job_name_and_user():
    p = job_from_environ((SLURM / "batch.environ").read_bytes())
    assert p.malformed == 0
    j = p.value
    assert j is not None
    assert (j.job_id, j.name, j.user, j.uid, j.step) == ("1", "llama-7b", "root", 0, None)
    assert (j.array_job_id, j.array_task_id) == (None, None)


def test_an_array_tasks_environment_and_a_step():
    raw = b"\0".join(
        [
            b"SLURM_JOB_ID=4127",
            b"SLURM_STEP_ID=2",
            b"SLURM_ARRAY_JOB_ID=4120",
            b"SLURM_ARRAY_TASK_ID=7",
            b"SLURM_JOB_NAME=\x1b[31mred\x1b[0m",
            b"SLURM_BROKEN",
        ]
    )
    p = job_from_environ(raw)
    assert p.malformed == 1
    j = p.value
    assert j is not None
    assert (j.job_id, j.step, j.array_job_id, j.array_task_id) == ("4127", "2", "4120", "7")
    assert j.name == "[31mred[0m"  # control characters never reach a label or chat


def test_an_environment_without_slurm_or_with_a_bad_id():
    assert job_from_environ(b"PATH=/bin\0HOME=/root\0").value is None
    p = job_from_environ(b"SLURM_JOB_ID=12;rm -rf\0")
    assert p.value is None and p.malformed == 1


def test_listpids_as_slurmd_printed_it():
    p = parse_listpids((SLURM / "listpids.txt").read_text())
    assert p.malformed == 0
    assert {pid: (j.job_id, j.step) for pid, j in p.value.items()} == {
        20842: ("1", "batch"),
        20843: ("1", "batch"),
        20844: ("3", "batch"),
        20845: ("3", "batch"),
    }


def test_listpids_counts_a_broken_line():
    p = parse_listpids("PID JOBID STEPID LOCALID GLOBALID\nnonsense\n17 4 0 0 0\n")
    assert p.malformed == 1 and list(p.value) == [17]


def test_show_job_as_slurmctld_printed_it():
    p = parse_show_job((SLURM / "show-job-o.txt").read_text())
    assert p.malformed == 0
    jobs = p.value
    assert set(jobs) == {"1", "2", "3"}
    one = jobs["1"]
    assert (one.name, one.user, one.uid, one.state, one.requeue) == ("llama-7b", "root", 0, "RUNNING", True)
    assert (one.array_job_id, one.array_task_id) == (None, None)
    task = jobs["3"]
    assert (task.name, task.array_job_id, task.array_task_id, task.state) == (
        "fine tune",
        "2",
        "3",
        "RUNNING",
    )
    assert jobs["2"].state == "PENDING"


def test_a_value_holding_equals_signs_stays_whole():
    kv = pairs("JobId=9 JobName=a b TRES=cpu=1,node=1,billing=1 AllocNode:Sid=host:4514 Power=")
    assert kv["JobName"] == "a b"
    assert kv["TRES"] == "cpu=1,node=1,billing=1"
    assert kv["AllocNode:Sid"] == "host:4514"
    assert kv["Power"] == ""


def test_an_unnamed_uid_and_a_long_name():
    p = parse_show_job(f"JobId=7 JobName={'x' * 999} UserId=(4242) JobState=RUNNING\nJobId=oops\n")
    assert p.malformed == 1
    j = p.value["7"]
    assert j.user is None and j.uid == 4242 and j.name is not None and len(j.name) == MAX_FIELD


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400), st.binary(max_size=400))
def test_the_parsers_never_raise(text: str, raw: bytes):
    for parsed in (
        job_from_proc_cgroup(text),
        parse_listpids(text),
        parse_show_job(text),
        job_from_environ(raw),
    ):
        assert parsed.malformed >= 0
    job_from_cgroup_path(text)
