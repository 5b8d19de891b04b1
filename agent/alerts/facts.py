"""What the alerter needs to know of an event before any wording: which condition it is (the
fingerprint that deduplicates and resolves), how bad, whether it stays active until a clearing event,
whether it jumps the queue or waits out ``[alerts] verdict_hold``. Pure: events in, facts out; one
function per kind of event, which ``kinds.KINDS`` names beside its wording.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from agent.core.events import (
    AgentLifecycleEvent,
    CheckpointEvent,
    CollectorFailingEvent,
    GoodputDigestEvent,
    GpuFaultEvent,
    JobAdviceEvent,
    PreemptionEvent,
    SchedulerEvent,
    VerdictEvent,
)
from agent.core.vocabulary import (
    CHECKPOINT_FAILURES,
    QUIET_VERDICTS,
    AlertKind,
    GpuFault,
    SchedulerProblem,
    Severity,
)

# Xids that mean the hardware or driver is in trouble, not the application (13, 31, 43 and 45 are
# usually the program's own fault)
FATAL_XIDS = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140})


@dataclass(frozen=True, slots=True)
class Facts:
    fingerprint: str
    kind: str  # an AlertKind, or "test" (training-node-agent test-alert)
    severity: Severity
    resolved: bool
    sustained: bool  # stays active until a clearing event; reminded every repeat_interval
    priority: bool = False
    held: bool = False  # waits [alerts] verdict_hold before it goes out


def preemption(event: PreemptionEvent) -> Facts:
    return Facts(
        f"preemption/{event.provider}/{event.event_id}",
        AlertKind.PREEMPTION,
        Severity.WARNING if event.drill else Severity.CRITICAL,
        resolved=event.withdrawn,
        sustained=False,
        priority=not event.withdrawn,
    )


def checkpoint(event: CheckpointEvent) -> Facts:
    bad = event.phase in CHECKPOINT_FAILURES
    sev = Severity.INFO if event.drill and not bad else Severity.CRITICAL if bad else Severity.INFO
    return Facts(f"checkpoint/{event.event_id}/{event.phase}", AlertKind.CHECKPOINT, sev, False, False)


def verdict(event: VerdictEvent) -> Facts:
    quiet = event.verdict in QUIET_VERDICTS
    return Facts(
        f"verdict/{event.verdict}",
        AlertKind.VERDICT,
        Severity.INFO if quiet else Severity.WARNING,
        resolved=event.cleared,
        sustained=not quiet,
        held=True,
    )


def gpu_fault(event: GpuFaultEvent) -> Facts:
    gpu = event.uuid or event.pci_bus_id
    if event.fault == GpuFault.XID:
        sev = Severity.CRITICAL if event.xid in FATAL_XIDS else Severity.WARNING
        return Facts(f"gpu/{gpu}/xid/{event.xid}", AlertKind.GPU_FAULT, sev, event.cleared, False)
    critical = (GpuFault.LOST, GpuFault.ECC, GpuFault.UNRESPONSIVE)
    sev = Severity.CRITICAL if event.fault in critical else Severity.WARNING
    return Facts(f"gpu/{gpu}/{event.fault}", AlertKind.GPU_FAULT, sev, event.cleared, True)


def collector_failing(event: CollectorFailingEvent) -> Facts:
    return Facts(
        f"collector/{event.collector}", AlertKind.COLLECTOR_FAILING, Severity.WARNING, event.cleared, True
    )


def scheduler(event: SchedulerEvent) -> Facts:
    if event.problem == SchedulerProblem.FAILING:
        key = f"scheduler/{event.node}/{event.problem}"
        return Facts(key, AlertKind.SCHEDULER, Severity.WARNING, event.cleared, True)
    key = f"scheduler/{event.node}/{event.problem}/{event.event_id}"
    return Facts(key, AlertKind.SCHEDULER, Severity.CRITICAL, False, False)


def goodput(event: GoodputDigestEvent) -> Facts:
    return Facts(f"goodput/{event.until:%Y%m%dT%H%M%S}", AlertKind.GOODPUT, Severity.INFO, False, False)


def job_advice(event: JobAdviceEvent) -> Facts:
    # a job's summary at its end: the goodput family's, routed as its digest is
    return Facts(
        f"advice/{event.job}/{event.at:%Y%m%dT%H%M%S}", AlertKind.GOODPUT, Severity.INFO, False, False
    )


def agent(event: AgentLifecycleEvent) -> Facts:
    # every start and stop is its own alert
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%f")
    return Facts(f"agent/{event.phase}/{stamp}", AlertKind.AGENT, Severity.INFO, False, False)
