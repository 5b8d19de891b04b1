"""Pure parsers for where a process's Slurm job is written: its cgroup path, its environment,
``scontrol listpids`` and ``scontrol show job -o``. Text in, typed values out; they never raise on
bad input (a line that cannot be read is counted, as the other sources' parsers do).

Slurm's layouts (its cgroup plugins; docs: slurm.schedmd.com/cgroup_v2.html):

- cgroup v2: ``0::/system.slice/slurmstepd.scope/job_4127/step_0/user/task_0`` (the batch script's
  step is ``step_batch``, then ``slurm``); built with multiple-slurmd, as Debian's is, the scope is
  ``<nodename>_slurmstepd.scope``;
- cgroup v1: ``4:memory:/slurm/uid_1000/job_4127/step_0/task_0`` (``/slurm_<nodename>/`` with
  multiple-slurmd).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.sources.host.parse import Parsed
from agent.sources.processes.cgroup import parse_proc_cgroup

# job_<id> then optionally step_<id>; under slurmstepd's scope (v2) or the slurm folder (v1)
_V2 = re.compile(r"/(?:[^/]+_)?slurmstepd\.scope/job_(\d+)(?:/step_([A-Za-z0-9]+))?(?:/|$)", re.ASCII)
_V1 = re.compile(r"/slurm(?:_[^/]+)?/uid_(\d+)/job_(\d+)(?:/step_([A-Za-z0-9]+))?(?:/|$)", re.ASCII)
MAX_FIELD = 256  # a job name or user longer than this is cut: it ends up in labels and chat


@dataclass(frozen=True, slots=True)
class ProcJob:
    """What one process says of its job, before ``scontrol show job`` adds name and user."""

    job_id: str
    step: str | None = None
    uid: int | None = None
    name: str | None = None
    user: str | None = None
    array_job_id: str | None = None
    array_task_id: str | None = None


def job_from_cgroup_path(path: str) -> ProcJob | None:
    """One cgroup path -> its Slurm job and step, None when it is not inside one."""
    m = _V2.search(path)
    if m:
        return ProcJob(m.group(1), m.group(2))
    m = _V1.search(path)
    if m:
        return ProcJob(m.group(2), m.group(3), uid=int(m.group(1)))
    return None


def job_from_proc_cgroup(text: str) -> Parsed[ProcJob | None]:
    """``/proc/<pid>/cgroup`` -> the job of the first hierarchy that places it in one (v2's single
    line, or any v1 controller: they all carry the same job and step)."""
    entries = parse_proc_cgroup(text)
    for e in entries.value:
        job = job_from_cgroup_path(e.path)
        if job is not None:
            return Parsed(job, entries.malformed)
    return Parsed(None, entries.malformed)


def clean(value: str | None) -> str | None:
    """A name or user as it may go into a label, a status line or chat: printable, bounded."""
    if value is None:
        return None
    out = "".join(c for c in value if c.isprintable()).strip()[:MAX_FIELD]
    return out or None


def job_from_environ(raw: bytes) -> Parsed[ProcJob | None]:
    """``/proc/<pid>/environ`` (NUL-separated) -> SLURM_JOB_ID and its company, None without it.
    The environment is the process's own to change, so it is only the second source, after the
    cgroup the kernel keeps; scontrol's name and user win over SLURM_JOB_NAME and SLURM_JOB_USER."""
    env: dict[str, str] = {}
    bad = 0
    for item in raw.split(b"\0"):
        if not item.startswith(b"SLURM_"):
            continue
        key, eq, value = item.partition(b"=")
        if not eq:
            bad += 1
            continue
        env[key.decode("ascii", "replace")] = value.decode("utf-8", "replace")
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if job_id is None:
        return Parsed(None, bad)
    if not _num(job_id):
        return Parsed(None, bad + 1)
    uid = env.get("SLURM_JOB_UID", "")
    return Parsed(
        ProcJob(
            job_id,
            _digits_or_word(env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")),
            int(uid) if _num(uid) else None,
            clean(env.get("SLURM_JOB_NAME")),
            clean(env.get("SLURM_JOB_USER")),
            _digits(env.get("SLURM_ARRAY_JOB_ID")),
            _digits(env.get("SLURM_ARRAY_TASK_ID")),
        ),
        bad,
    )


def _num(v: str) -> bool:
    return v.isascii() and v.isdigit()


def _word(v: str) -> bool:
    return v.isascii() and v.isalnum()


def _digits(v: str | None) -> str | None:
    return v if v is not None and _num(v) else None


def _digits_or_word(v: str | None) -> str | None:
    return v if v is not None and _word(v) else None


def parse_listpids(text: str) -> Parsed[dict[int, ProcJob]]:
    """``scontrol listpids``: a header, then ``PID JOBID STEPID LOCALID GLOBALID`` per process
    (``-`` where slurmd has no task id for it, as for slurmstepd itself)."""
    out: dict[int, ProcJob] = {}
    bad = 0
    for line in text.splitlines():
        f = line.split()
        if not f or f[0] == "PID":
            continue
        if len(f) < 3 or not _num(f[0]) or not _num(f[1]):
            bad += 1
            continue
        out[int(f[0])] = ProcJob(f[1], f[2] if _word(f[2]) else None)
    return Parsed(out, bad)


# ``Key=value`` pairs of one ``scontrol show job -o`` line: a key is a capitalised word (a few have
# a colon or slash: ``Socks/Node``, ``MinCPUsNode``), and a value runs to the next key, so a job
# name with spaces (``JobName=fine tune``) is kept whole
_PAIR = re.compile(r"(?:^|\s)([A-Z][A-Za-z0-9_:/]*)=")
_USER = re.compile(r"^(.*)\((\d+)\)$", re.ASCII)


@dataclass(frozen=True, slots=True)
class ShownJob:
    job_id: str
    name: str | None
    user: str | None
    uid: int | None
    state: str | None
    array_job_id: str | None = None
    array_task_id: str | None = None
    requeue: bool | None = None


def pairs(line: str) -> dict[str, str]:
    keys = list(_PAIR.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out.setdefault(m.group(1), line[m.end() : end].strip())
    return out


def parse_show_job(text: str) -> Parsed[dict[str, ShownJob]]:
    """``scontrol show job -o [ID]``: one line per job -> job id -> what it says. ``UserId`` is
    ``alice(1000)``, or the bare uid in parentheses where the controller cannot name it."""
    out: dict[str, ShownJob] = {}
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        kv = pairs(line)
        job_id = kv.get("JobId", "")
        if not _num(job_id):
            bad += 1
            continue
        user, uid = None, None
        m = _USER.match(kv.get("UserId", ""))
        if m:
            uid = int(m.group(2))
            user = clean(m.group(1)) if m.group(1) not in ("", "(null)") else None
        array_task = kv.get("ArrayTaskId")
        requeue = kv.get("Requeue")
        out[job_id] = ShownJob(
            job_id,
            clean(kv.get("JobName")),
            user,
            uid,
            kv.get("JobState"),
            _digits(kv.get("ArrayJobId")),
            array_task if array_task and _num(array_task) else None,
            None if requeue not in ("0", "1") else requeue == "1",
        )
    return Parsed(out, bad)
