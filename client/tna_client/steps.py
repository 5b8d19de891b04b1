"""Step times for the agent, at no cost to the training loop.

``guard.step()`` at each step boundary (the Lightning and HF callbacks call it by themselves) reads
the monotonic clock (vDSO, no syscall) and appends the gap since the last call to a list. Once per
reporting period (``[trainer] step_report``, 5 s unless the agent's discovery record or
``$TNA_STEP_REPORT`` says otherwise) the list becomes count, sum and a few quantiles, written to
``steps-<pid>.json`` beside the request file, whole (a temp name and a rename) and without fsync: the
figures are cumulative, so a report lost in a crash loses nothing the next one does not carry.

    {"kind": "steps", "pid": 4242, "rank": 3, "local_rank": 3, "world_size": 16, "job": "8812",
     "count": 1200, "sum": 611.5, "period": {"count": 10, "sum": 5.1, "p50": 0.5, "p90": 0.52,
     "p99": 0.61, "max": 0.61}, "time": "2025-03-14T06:11:00.000Z",
     "spans": {"checkpoint": {"count": 3, "seconds": 14.2}, "evaluation": {"count": 1, "seconds": 6.0},
               "data": {"count": 1199, "seconds": 40.3}},
     "recent": [["checkpoint", 1741932600.5, 1741932605.2], ["evaluation", 1741932655.0, null]]}

``spans`` and ``recent`` are what the trainer says of its own pauses (:mod:`tna_client.spans`); a
checkpoint or evaluation span rewrites the report as it begins and ends, whatever the period.

The job is what the trainer's environment says: ``$TNA_JOB``, else ``$SLURM_JOB_ID``, else
torchrun's rendezvous id ``$TORCHELASTIC_RUN_ID`` (the same on every node of a job).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from tna_client.files import rfc3339, write_json_atomic
from tna_client.spans import SpanRecorder

ENV_STEP_REPORT = "TNA_STEP_REPORT"
ENV_JOB = "TNA_JOB"
DEFAULT_STEP_REPORT = 5.0
JOB_KEYS = (ENV_JOB, "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
MAX_JOB = 128
MAX_GAPS = 1 << 16  # gaps kept per period; a faster loop keeps every other one (quantiles hold)

log = logging.getLogger("tna_client")


def job_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    for key in JOB_KEYS:
        value = env.get(key, "").strip()
        if value and value != "none":  # torchrun's default run id is "none": no job name
            return value[:MAX_JOB]
    return None


def _int_env(env: Mapping[str, str], *keys: str) -> int | None:
    for key in keys:
        value = env.get(key, "").strip()
        if value.isdigit():
            return int(value)
    return None


def quantile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank quantile of a sorted, non-empty list."""
    i = min(len(sorted_values) - 1, max(0, int(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[i]


def summarize(gaps: list[float]) -> dict[str, float]:
    s = sorted(gaps)
    return {
        "count": len(s),
        "sum": sum(s),
        "p50": quantile(s, 0.5),
        "p90": quantile(s, 0.9),
        "p99": quantile(s, 0.99),
        "max": s[-1],
    }


def period_from(record: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None) -> float:
    """The reporting period: ``$TNA_STEP_REPORT`` (seconds), the agent's record, else 5 s."""
    env = os.environ if environ is None else environ
    for value in (env.get(ENV_STEP_REPORT), (record or {}).get("step_report")):
        try:
            seconds = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if 0.1 <= seconds <= 3600:
            return seconds
    return DEFAULT_STEP_REPORT


class StepReporter(SpanRecorder):
    """The step counter behind :meth:`PreemptionGuard.step`; the guard inherits it."""

    _step_last: float | None
    _step_gaps: list[float]
    _step_extra: tuple[int, float]
    _step_due: float
    _step_count: int
    _step_sum: float
    step_period: float
    step_error: str | None

    def _init_steps(self, record: Mapping[str, Any] | None) -> None:
        self._step_last = None
        self._step_gaps = []
        self._step_extra = (0, 0.0)  # gaps thinned out of this period: count, sum
        self._step_count = 0
        self._step_sum = 0.0
        self.step_period = period_from(record)
        self._step_due = time.monotonic() + self.step_period
        self.step_error = None  # why the last report could not be written
        self._step_period_figures: dict[str, float] | None = None  # the last period's, for a span's report
        self._init_spans()
        env = os.environ
        self._step_identity = {
            "local_rank": _int_env(env, "LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"),
            "world_size": _int_env(env, "WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"),
            "job": job_from_env(env),
        }

    def step(self) -> None:
        """Mark a step boundary. A clock read and a list append; the report goes out at most once a
        period, from here, so no thread is started (DataLoader workers ``fork``)."""
        now = time.monotonic()
        last = self._step_last
        self._step_last = now
        if last is not None:
            gaps = self._step_gaps
            gaps.append(now - last)
            if len(gaps) >= MAX_GAPS:
                self._thin()
        if now >= self._step_due:
            self._step_report(now)

    def _thin(self) -> None:
        """Half the gaps go, their count and sum stay: the period's figures stay exact, its
        quantiles come from every other gap in order of size (a loop of over 13,000 steps a second)."""
        gaps = sorted(self._step_gaps)
        kept = gaps[::2]
        count, total = self._step_extra
        self._step_extra = (count + len(gaps) - len(kept), total + sum(gaps) - sum(kept))
        self._step_gaps = kept

    def _step_dir(self) -> str | None:
        raise NotImplementedError

    def _step_rank(self) -> int:
        raise NotImplementedError

    def _step_report(self, now: float, force: bool = False) -> None:
        self._step_due = now + self.step_period
        gaps, self._step_gaps = self._step_gaps, []
        if gaps:
            period = summarize(gaps)
            extra, self._step_extra = self._step_extra, (0, 0.0)
            period["count"] += extra[0]
            period["sum"] += extra[1]
            self._step_count += int(period["count"])
            self._step_sum += period["sum"]
            self._step_period_figures = period
        elif not force:
            return
        else:  # a span began or ended between two periods: the last period's figures again
            period = self._step_period_figures or dict.fromkeys(
                ("count", "sum", "p50", "p90", "p99", "max"), 0.0
            )
        directory = self._step_dir()
        if directory is None:
            return  # no agent found (yet): the counts go on, the next report carries them
        pid = os.getpid()
        body = {
            "kind": "steps",
            "pid": pid,
            "rank": self._step_rank(),
            **self._step_identity,
            "count": self._step_count,
            "sum": round(self._step_sum, 6),
            "period": {k: round(v, 6) for k, v in period.items()},
            "time": rfc3339(time.time()),
            **self._span_body(),
        }
        try:
            write_json_atomic(directory, f"steps-{pid}.json", body, durable=False)
            self.step_error = None
        except OSError as e:
            if self.step_error is None:
                log.debug("cannot leave the step report in %s: %s", directory, e)
            self.step_error = str(e)

    def _report_spans(self) -> None:
        """A checkpoint or evaluation span began or ended: the agent learns it now, not a period later."""
        self._step_report(time.monotonic(), force=True)

    def _step_forget(self) -> None:
        """Take back the report (the process is done with the guard)."""
        directory = self._step_dir()
        if directory is not None:
            try:
                os.unlink(os.path.join(directory, f"steps-{os.getpid()}.json"))
            except OSError:
                pass
