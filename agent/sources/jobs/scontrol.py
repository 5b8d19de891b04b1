"""The agent's one door to Slurm's commands, :class:`Scontrol` (argv lists, never a shell, a time
limit on every call), and the jobs source's use of it.

The scheduler's Slurm backend (``agent/scheduler/backends/slurm.py``) awaits its calls; the jobs
source runs them on a worker thread of its own (:class:`JobLookup`: ``scontrol show job -o ID`` and
``scontrol listpids``), so a slow, hanging or missing scontrol (slurmctld down, a wedged slurmd)
never holds up a tick: the collector reads what the thread last learned, and asks for more without
waiting. Its failures wait by ``core/backoff.py`` and are counted; what a job is called is kept
``refresh`` seconds, at most ``max_jobs`` of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import structlog

from agent.core.backoff import Backoff
from agent.core.oneline import one_line
from agent.sources.jobs.parse import ProcJob, ShownJob, parse_listpids, parse_show_job

log = structlog.get_logger("jobs")

LISTPIDS_SECONDS = 10.0  # how often slurmd's process list is read again while a process is unplaced
NEGATIVE_SECONDS = 30.0  # a job the controller does not know is asked about again after this
MAX_OUTPUT = 1 << 20  # an answer past this is cut (one job's line is ~1.5 KB)


@dataclass(slots=True)
class Known:
    job: ShownJob | None  # None: the controller said it has no such job
    at: float


def _said(out: str | bytes | None) -> str:
    if isinstance(out, bytes):
        out = out.decode("utf-8", "replace")
    return " ".join((out or "").split())[:200]


class SlurmError(Exception):
    """A Slurm command that failed, timed out or could not run: one line that says which."""


class Scontrol:
    """Runs Slurm's commands (``scontrol``, ``scancel``, ``slurmd -C``), each bounded by ``timeout``."""

    def __init__(self, timeout: float, scontrol: str = "scontrol", scancel: str = "scancel") -> None:
        self.timeout = timeout
        self.scontrol = scontrol
        self.scancel = scancel

    async def run(self, argv: list[str]) -> str:
        """stdout of ``argv``; SlurmError on a missing binary, a timeout or a non-zero exit."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]} not found") from None
        except OSError as e:
            raise SlurmError(f"cannot run {argv[0]}: {e.strerror or e}") from None
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await proc.communicate()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise SlurmError(f"{' '.join(argv[:3])} took longer than {self.timeout:g}s") from None
        if proc.returncode != 0:
            said = one_line(err.decode(errors="replace") or out.decode(errors="replace"), 200)
            raise SlurmError(f"{' '.join(argv[:3])} failed ({proc.returncode}): {said or 'no output'}")
        return out.decode(errors="replace")

    def blocking(self, *args: str) -> subprocess.CompletedProcess[str] | str:
        """``scontrol args`` run to its end on this thread (a worker's): its result, whatever its
        exit, or why it did not run (missing, not executable, timed out)."""
        try:
            return subprocess.run(
                [self.scontrol, *args],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=self.timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            return f"{self.scontrol} not found"
        except PermissionError:
            return f"{self.scontrol} is not executable"
        except subprocess.TimeoutExpired:
            return f"{self.scontrol} {' '.join(args)} did not answer in {self.timeout:g}s"
        except OSError as e:
            return f"{self.scontrol}: {e.strerror or e}"


class JobLookup:
    def __init__(self, program: str, timeout: float, refresh: float, max_jobs: int, node: str = "") -> None:
        self.slurm = Scontrol(timeout, program)
        self.node = node  # slurmd's node name where it is not the hostname (listpids needs it)
        self.refresh = refresh
        self.max_jobs = max_jobs
        self._known: OrderedDict[str, Known] = OrderedDict()
        self._wanted: set[str] = set()
        self._want_pids = False
        self._pids: dict[int, ProcJob] = {}
        self._pids_at = -LISTPIDS_SECONDS
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._backoff = Backoff(1.0, 60.0)
        self._retry_at = 0.0
        self.problem: str | None = None
        self.failed_total = 0
        self.malformed = 0

    # --- what the collector asks (never blocks) ----------------------------------------------------

    def shown(self, job_id: str) -> ShownJob | None:
        with self._cond:
            k = self._known.get(job_id)
            return k.job if k else None

    def want(self, job_ids: set[str], pids: bool) -> None:
        """Ask, without waiting, for these jobs' names (where not fresh) and, with ``pids``, for
        slurmd's process list (where older than ``LISTPIDS_SECONDS``)."""
        now = time.monotonic()
        with self._cond:
            stale = {
                j
                for j in job_ids
                if (k := self._known.get(j)) is None
                or now - k.at > (self.refresh if k.job is not None else NEGATIVE_SECONDS)
            }
            list_now = pids and not self._want_pids and now - self._pids_at > LISTPIDS_SECONDS
            wake = bool(stale - self._wanted) or list_now
            self._wanted |= stale
            self._want_pids = self._want_pids or list_now
            if wake and not self._closed:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._work, name="scontrol", daemon=True)
                    self._thread.start()
                self._cond.notify()

    def listpids(self) -> dict[int, ProcJob]:
        with self._cond:
            return self._pids

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    # --- the worker thread ---------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not (self._wanted or self._want_pids):
                    self._cond.wait()
                if self._closed:
                    return
                wait = self._retry_at - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)  # backing off; close() ends it at once
                    continue
                job = next(iter(sorted(self._wanted)), None)
                pids = self._want_pids and job is None
            try:
                if job is not None:
                    self._show(job)
                elif pids:
                    self._listpids()
            except Exception as e:  # a bug here must not end the lookups for good: said, backed off
                log.exception("scontrol lookup failed")
                self._failed(f"lookup failed: {type(e).__name__}: {e}")

    def _failed(self, why: str) -> None:
        with self._cond:
            self.failed_total += 1
            first = self.problem is None
            self.problem = why
            self._retry_at = time.monotonic() + self._backoff.next()
        if first:
            log.warning("scontrol fails: jobs are shown by id only", problem=why)

    def _ok(self) -> None:
        with self._cond:
            if self.problem is not None:
                log.info("scontrol answers again", was=self.problem)
            self.problem = None
            self._backoff.reset()

    def _show(self, job_id: str) -> None:
        r = self.slurm.blocking("show", "job", "-o", job_id)
        if isinstance(r, str):
            return self._failed(r)
        if r.returncode != 0 and "invalid job id" not in r.stderr.lower():
            return self._failed(f"scontrol show job {job_id}: exit {r.returncode}: {_said(r.stderr)}")
        parsed = parse_show_job(r.stdout[:MAX_OUTPUT] if r.returncode == 0 else "")
        self._ok()
        with self._cond:
            self.malformed += parsed.malformed
            now = time.monotonic()
            self._wanted.discard(job_id)
            self._known[job_id] = Known(parsed.value.get(job_id), now)
            self._known.move_to_end(job_id)
            while len(self._known) > self.max_jobs:
                self._known.popitem(last=False)

    def _listpids(self) -> None:
        r = self.slurm.blocking("listpids", "*", self.node) if self.node else self.slurm.blocking("listpids")
        with self._cond:
            self._want_pids = False
            self._pids_at = time.monotonic()
        if isinstance(r, str):
            return self._failed(r)
        if r.returncode != 0:
            return self._failed(f"scontrol listpids: exit {r.returncode}: {_said(r.stderr)}")
        parsed = parse_listpids(r.stdout[:MAX_OUTPUT])
        self._ok()
        with self._cond:
            self.malformed += parsed.malformed
            self._pids = parsed.value
