"""What to tell the scheduler: pure functions of the events, the config, the node's state and the clock.

A *cause* is a reason to keep the node drained (a notice, a lost GPU, a fatal Xid). The agent owns a
drain only when its reason starts with ``tna:``: ownership is read back from the scheduler, so a
restart or a lost state_dir never turns the agent's drain into a foreign one, nor a foreign one
into the agent's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from enum import StrEnum
from fnmatch import fnmatchcase

from agent.config.scheduler import SchedulerSection
from agent.core.events import GpuFaultEvent, PreemptionEvent
from agent.core.vocabulary import GpuFault, OnReclaim
from agent.scheduler.backend import JobInfo, NodeInfo, clean_reason

OWN_PREFIX = "tna:"
ROW_REMAP = "row remapping failed"  # agent/faults/gpu.py's detail for a failed row remap


@dataclass(frozen=True, slots=True)
class Cause:
    key: str  # "notice/<event id>", "gpu/0/lost", "gpu/0/xid/79", "gpu/0/row-remap"
    reason: str  # the drain reason, "tna: ..."
    expires_at: float | None = None  # wall time it stops standing by itself; None: until cleared


def owns(reason: str) -> bool:
    """The drain reason is one this agent set."""
    return reason.startswith(OWN_PREFIX)


def _reason(text: str) -> str:
    return clean_reason(f"{OWN_PREFIX} {text}")


def notice_cause(ev: PreemptionEvent, cfg: SchedulerSection) -> Cause | None:
    """The cause a notice stands for, or None when ``drain_on_notices`` leaves its kind alone."""
    if not any(fnmatchcase(ev.kind, p) for p in cfg.drain_on_notices):
        return None
    deadline = ev.deadline or ev.received_at
    at = deadline.astimezone(UTC).strftime("%H:%M:%SZ")
    return Cause(
        key=f"notice/{ev.event_id}",
        reason=_reason(f"{ev.kind} at {at}"),
        expires_at=deadline.timestamp() + cfg.notice_expiry,
    )


def fault_cause(ev: GpuFaultEvent, cfg: SchedulerSection) -> Cause | None:
    """The cause a GPU fault stands for (also for its ``cleared`` event: the key to drop), or None.

    An Xid has no clearing event: its cause stands for ``resume_after`` (a few polls at least, so
    the drain is set), then the health gate (no Xid for ``resume_after``) holds the drain until the
    GPU has been quiet that long."""
    who = f"gpu {ev.gpu_name}" + (f" ({ev.uuid})" if ev.uuid else "")
    if ev.fault == GpuFault.LOST and cfg.drain_on_lost_gpu:
        return Cause(f"gpu/{ev.gpu_name}/lost", _reason(f"{who} lost"))
    if ev.fault == GpuFault.XID and ev.xid in cfg.drain_on_xids:
        stands = max(cfg.resume_after, 3 * cfg.poll_interval)
        return Cause(
            f"gpu/{ev.gpu_name}/xid/{ev.xid}", _reason(f"xid {ev.xid} on {who}"), ev.at.timestamp() + stands
        )
    if ev.fault == GpuFault.ECC and ev.detail.startswith(ROW_REMAP) and cfg.drain_on_row_remap_failure:
        return Cause(f"gpu/{ev.gpu_name}/row-remap", _reason(f"row remap failed on {who}"))
    if ev.fault in cfg.drain_on_degraded:  # stands until the condition clears
        return Cause(f"gpu/{ev.gpu_name}/{ev.fault}", _reason(f"{ev.fault} on {who}: {ev.detail}"))
    return None


def standing(causes: Mapping[str, Cause], now: float) -> list[Cause]:
    """The causes that still stand at ``now``, oldest first (dict order is arrival order)."""
    return [c for c in causes.values() if c.expires_at is None or c.expires_at > now]


class Step(StrEnum):
    NOTHING = "nothing"
    DRAIN = "drain"
    RESUME = "resume"
    WAIT = "wait"  # the agent's own drain stays until the health gate has held long enough
    FOREIGN = "foreign"  # someone else's drain: never lifted, never changed


@dataclass(frozen=True, slots=True)
class Decision:
    step: Step
    reason: str = ""  # the drain reason, or why the drain stays


def decide(
    node: NodeInfo, wanted: list[Cause], gate_why: str | None, held_for: float, resume_after: float
) -> Decision:
    """One look at the node: drain it, lift the agent's own drain, or leave it.

    ``gate_why`` is None when the health gate passes (else what fails); ``held_for`` is how long it
    has passed without a break."""
    ours = node.drained and owns(node.reason)
    if node.drained and not ours:
        return Decision(Step.FOREIGN, node.reason)
    if wanted:
        return Decision(Step.NOTHING, node.reason) if ours else Decision(Step.DRAIN, wanted[0].reason)
    if not ours:
        return Decision(Step.NOTHING)
    if gate_why is not None:
        return Decision(Step.WAIT, gate_why)
    if held_for < resume_after:
        return Decision(Step.WAIT, f"health gate held {held_for:.0f}s of {resume_after:.0f}s")
    return Decision(Step.RESUME)


@dataclass(frozen=True, slots=True)
class JobPlan:
    act: list[JobInfo]  # requeued (or cancelled)
    refused: list[JobInfo]  # not requeueable: named, left alone


def reclaim_plan(jobs: list[JobInfo], on_reclaim: OnReclaim) -> JobPlan:
    if on_reclaim == OnReclaim.NONE:
        return JobPlan([], [])
    if on_reclaim == OnReclaim.CANCEL:
        return JobPlan(list(jobs), [])
    return JobPlan([j for j in jobs if j.requeueable], [j for j in jobs if not j.requeueable])


def job_words(job: JobInfo) -> str:
    """``job 4127 `llama-7b` (alice)``: how a job is named in logs and alerts."""
    return f"job {job.job_id} `{job.name}` ({job.user})"


@dataclass(frozen=True, slots=True)
class GateInputs:
    gpus_at_start: frozenset[int]  # the GPUs NVML listed at start
    gpus_up: frozenset[int] | None  # the ones that answer now; None when NVML did not answer
    last_xid_at: float | None  # monotonic time of the last Xid, any GPU
    failing_collectors: frozenset[str]
    gpu_enabled: bool = True
    gpus_unresponsive: frozenset[int] = frozenset()  # NVML calls for them do not return


def gate(g: GateInputs, now: float, hold: float) -> str | None:
    """None when the node is healthy enough to take jobs again, else one line that says why not."""
    if g.failing_collectors:
        return f"collectors failing: {', '.join(sorted(g.failing_collectors))}"
    if not g.gpu_enabled:
        return None
    if g.gpus_up is None:
        return "NVML does not answer"
    if g.gpus_unresponsive:
        hung = ", ".join(map(str, sorted(g.gpus_unresponsive)))
        return f"GPU {hung} unresponsive (NVML calls do not return)"
    missing = sorted(g.gpus_at_start - g.gpus_up)
    if missing:
        return f"GPU {', '.join(map(str, missing))} missing (listed at start)"
    if g.last_xid_at is not None and now - g.last_xid_at < hold:
        return f"an Xid {now - g.last_xid_at:.0f}s ago (hold {hold:.0f}s)"
    return None
