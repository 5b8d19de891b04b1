"""What a config turns into: the collectors, the exporter's renderers and the parts (components).

The daemon (``daemon.py``) calls these at start and at every reload and runs what they return; no
other module builds parts, so this and the daemon are the only places that wire them together.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from agent.advice.component import AdviceComponent
from agent.checkpoint.component import CheckpointComponent
from agent.classifier.component import ClassifierComponent
from agent.config import Config
from agent.context import Context
from agent.core.component import Component
from agent.exporter import malformed as malformed_metrics
from agent.faults.gpu import GpuHealth
from agent.fleet.peer import FleetPeer
from agent.ledger.component import LedgerComponent
from agent.ledger.savecost import save_view
from agent.preemption.watcher import PreemptionWatcher
from agent.report.recorder import ReportRecorder
from agent.scheduler.component import SchedulerComponent
from agent.snapshot import NodeSnapshot
from agent.sources import Collector
from agent.sources import registry as sources
from agent.sources.gpu.part import GpuPart
from agent.sources.jobs.gpus import job_of_pid
from agent.steps.component import StepsComponent

EMPTY = NodeSnapshot(seq=0, timestamp=0.0, monotonic=0.0)  # before the first tick

# other sources of training pids (the checkpoint targets), set by build_components
PidSource = Callable[[], Iterable[int]]


def training_pids(snap: NodeSnapshot, sources: Iterable[PidSource] = ()) -> set[int]:
    """The processes whose trees the process collector follows: every GPU compute process in the
    latest snapshot, plus what the parts found (the checkpoint targets of [trainer] discover)."""
    pids: set[int] = set()
    gpu = snap.part(GpuPart)
    if gpu is not None:
        for g in gpu.gpus:
            pids.update(p.pid for p in g.processes)
    for source in sources:
        pids.update(source())
    return pids


def build_collectors(
    cfg: Config, latest: Callable[[], NodeSnapshot] = lambda: EMPTY, pid_sources: Iterable[PidSource] = ()
) -> list[Collector]:
    """One collector per registered source that the config leaves on."""
    ctx = sources.BuildContext(cfg, latest, lambda: training_pids(latest(), pid_sources))
    return sources.build_collectors(ctx)


def build_renderers(cfg: Config) -> list[Any]:
    return [*sources.renderers(cfg), malformed_metrics.render]


def build_components(ctx: Context) -> list[Component]:
    components: list[Component] = [CheckpointComponent(ctx)]
    # the trainers' step figures, labelled with the Slurm job the jobs source placed each trainer in
    # (it wins over what the trainer's environment says)
    steps = StepsComponent(ctx, lambda pid: job_of_pid(ctx.latest(), pid))
    fleet = None
    if ctx.cfg.fleet.prometheus_url:
        # who sets the job's pace, from the fleet's rules: asked for the job the trainers name
        fleet = FleetPeer(ctx, lambda: steps.figures.job if steps.figures else None)
    classifier = None
    if ctx.cfg.classifier.enabled:
        classifier = ClassifierComponent(ctx, fleet.peer_note if fleet else None)
        components.append(classifier)
    ledger = None
    if ctx.cfg.goodput.enabled:
        # after the classifier: each snapshot is booked with the pressures of the window it closes
        ledger = LedgerComponent(ctx, classifier.published if classifier else None)
        components.append(ledger)
        if classifier is not None:
            classifier.saves = save_view(ledger)  # what a save it measures costs, and how often to make it
        advice = None
        if ctx.cfg.advice.enabled:
            # the job's buckets are the ledger's: no ledger, no advice
            advice = AdviceComponent(ctx, ledger)
            components.append(advice)
        # after the classifier and the ledger: a tick's point carries the verdict it closed with
        engine = classifier.engine if classifier else None
        components.append(
            ReportRecorder(
                ctx,
                ledger,
                (lambda: engine.current.label if engine.current else None) if engine else None,
                (lambda job: advice.advise(job, time.time())) if advice else None,
            )
        )
    components.append(PreemptionWatcher(ctx))
    # always built: it serves the health check; it talks to Slurm only with [scheduler] kind set
    components.append(SchedulerComponent(ctx))
    components.append(steps)
    if fleet is not None:
        components.append(fleet)
    if ctx.cfg.gpu.enabled:
        components.append(GpuHealth(ctx))
    if ctx.cfg.alerts.webhooks:
        # imported only when a channel is configured: most of its weight (sqlite3, rendering) is memory
        from agent.alerts.alerter import Alerter

        # the ledger's losses by job: every alert says what a reclaim would cost each job on the node
        components.append(Alerter(ctx, job_losses=ledger.job_losses if ledger else None))
    return components
