"""The trainers' step figures as a daemon part: read the step reports every ``[trainer] step_report``
(off the loop), export the node's figures, say in the status when they are missing.

A trainer without ``tna_client`` (or one that never calls ``guard.step()``) changes nothing else:
the verdicts, the ledger and the checkpoints do not read these figures; only they are missing, and
``training_node_train_step_reporters`` is 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterable
from typing import Any

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from tna_client.node import start_ticks

from agent.context import Context
from agent.core.component import HasMetrics, HasStatus
from agent.steps.figures import JobOf, NodeSteps, node_figures
from agent.steps.report import QUANTILES, StepReport, collect

log = structlog.get_logger("steps")

MISSING = (
    "step figures missing: no trainer reports its steps "
    "(tna_client's guard.step(), or its Lightning or Hugging Face callback)"
)


class StepsComponent(HasMetrics, HasStatus):
    name = "steps"

    def __init__(self, ctx: Context, job_of: JobOf | None = None) -> None:
        self.period = ctx.cfg.trainer.step_report
        self.procfs = ctx.cfg.agent.procfs
        self.directory = ctx.cfg.trainer.request_path(ctx.runtime_dir).parent
        self.job_of = job_of  # pid -> the Slurm job the jobs source placed it in (figures.py)
        self.reports: dict[int, StepReport] = {}
        self.bad: dict[str, str] = {}
        self.figures: NodeSteps | None = None
        self._logged_bad: set[str] = set()

    async def run(self) -> None:
        while True:
            reports, bad = await asyncio.to_thread(self._look, time.time())
            self.reports, self.bad = reports, bad
            self.figures = node_figures(reports, self.job_of)
            for name, why in bad.items():
                if name not in self._logged_bad:
                    self._logged_bad.add(name)
                    log.warning("unusable step report skipped", file=str(self.directory / name), error=why)
            await asyncio.sleep(self.period)

    def _look(self, now: float) -> tuple[dict[int, StepReport], dict[str, str]]:
        """The reports of live trainers; the file of one that is gone is removed. A trainer in another
        pid namespace keeps rewriting its file, so only a report older than two periods whose pid is
        not alive here counts as gone; a live trainer that stopped stepping (a hang) stays, its
        counter flat."""
        reports, bad = collect(self.directory)
        out = {}
        for pid, r in reports.items():
            if now - r.time > 2 * self.period + 5 and start_ticks(pid, self.procfs) is None:
                with contextlib.suppress(OSError):
                    os.unlink(self.directory / f"steps-{pid}.json")
                continue
            out[pid] = r
        return out, bad

    async def stop(self) -> None:
        return None

    # --- faces -------------------------------------------------------------------------------------

    def metrics(self) -> Iterable[Metric]:
        f = self.figures
        reporters = GaugeMetricFamily(
            "training_node_train_step_reporters",
            "Training processes that report their steps (tna_client guard.step()); 0: step figures missing.",
        )
        reporters.add_metric([], float(len(f.ranks) if f else 0))
        yield reporters
        if f is None:
            return
        job = [f.job]
        steps = CounterMetricFamily(
            "training_node_train_steps",
            "Training steps the node's trainer made (its lowest local rank).",
            labels=["job_id"],
        )
        steps.add_metric(job, float(f.count))
        yield steps
        summary = Metric(
            "training_node_train_step_seconds",
            "Step time: quantiles of the last report period (the slowest rank), count and sum since start.",
            "summary",
        )
        for q in QUANTILES:
            summary.add_sample(
                "training_node_train_step_seconds", {"job_id": f.job, "quantile": _q(q)}, f.quantiles[q]
            )
        summary.add_sample("training_node_train_step_seconds_count", {"job_id": f.job}, float(f.count))
        summary.add_sample("training_node_train_step_seconds_sum", {"job_id": f.job}, f.sum)
        yield summary
        info = GaugeMetricFamily(
            "training_node_train_rank_info",
            "One series per training process that reports steps: its place in the job, value 1.",
            labels=["job_id", "rank", "local_rank", "world_size"],
        )
        for r in f.ranks:
            info.add_metric([f.job, str(r.rank), _opt(r.local_rank), _opt(r.world_size)], 1.0)
        yield info

    def status(self) -> dict[str, Any]:
        f = self.figures
        if f is None:
            out: dict[str, Any] = {"reporting": 0, "missing": True, "lines": [MISSING]}
        else:
            out = {
                "reporting": len(f.ranks),
                "missing": False,
                "job": f.job or None,
                "steps": f.count,
                "quantiles": dict(f.quantiles),
                "ranks": [r.rank for r in f.ranks],
                "age_seconds": round(time.time() - f.latest, 1),
            }
            p50 = f.quantiles["p50"]
            out["lines"] = [
                f"steps: {f.count} by {len(f.ranks)} rank(s){f' of job {f.job}' if f.job else ''}, "
                f"step time p50 {p50 * 1000:.0f} ms, p99 {f.quantiles['p99'] * 1000:.0f} ms "
                f"({out['age_seconds']:.0f} s ago)"
            ]
        if self.bad:
            out["unusable"] = dict(self.bad)
            out["lines"].append(f"unusable step reports: {', '.join(sorted(self.bad))}")
        return out


def _q(name: str) -> str:
    return str(int(name[1:]) / 100)  # p50 -> 0.5


def _opt(v: int | None) -> str:
    return "" if v is None else str(v)
