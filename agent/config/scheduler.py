"""[scheduler]: what the cluster's scheduler (a backend: Slurm built in) is told about this node, and when."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from agent.config.types import Duration, StrictModel, choice_from
from agent.core.vocabulary import GpuFault, NoticeKind, OnReclaim, SchedulerKind
from agent.scheduler import backend

# Xids that mean the GPU cannot run the next job (79 fell off the bus, 48 a double-bit ECC error,
# 74 NVLink, 95 uncontained ECC); the program's own Xids (13, 31, 43, 45) never drain a node
DEFAULT_DRAIN_XIDS = [79, 48, 74, 95]
# the conditions of a GPU that still works but runs slow or wants service (agent/faults/gpu.py raises
# each once held for its [gpu] hold, and clears it when it ends): none drains by default, a policy choice
DEGRADED = (
    GpuFault.THERMAL_THROTTLE,
    GpuFault.POWER_THROTTLE,
    GpuFault.PCIE_DEGRADED,
    GpuFault.NVLINK_DOWN,
    GpuFault.POWER_LIMIT_LOW,
    GpuFault.ECC_CORRECTED_RISING,
    GpuFault.NVLINK_ERRORS,
    GpuFault.ROW_REMAP_PENDING,
)


def kind_choices() -> tuple[str, ...]:
    """none, a declared backend's kind (agent/scheduler/backends/), or auto."""
    return (SchedulerKind.NONE, *backend.kinds(), SchedulerKind.AUTO)


Kind = Annotated[str, choice_from(kind_choices)]


class SchedulerSection(StrictModel):
    kind: Kind = Field(
        SchedulerKind.NONE,
        description="none, a backend's kind (slurm), or auto (the first backend that finds itself here:"
        " slurm if slurmd runs)",
    )
    node_name: str = Field(
        "",
        description="this node's name in the scheduler (Slurm's NodeName), for the scheduler action and"
        " the jobs source alike; empty = the one `slurmd -C` reports (never the hostname)",
    )
    drain_on_notices: list[str] = Field(
        default_factory=lambda: [
            "spot-*",
            NoticeKind.PREEMPT,
            NoticeKind.TERMINATION,
            "maintenance-*",
            "rebalance-*",
        ],
        description="notice kinds (shell patterns) that drain the node",
    )
    drain_on_lost_gpu: bool = Field(True, description="a GPU that fell off the bus drains the node")
    drain_on_xids: list[int] = Field(
        default_factory=lambda: list(DEFAULT_DRAIN_XIDS), description="Xid errors that drain the node"
    )
    drain_on_row_remap_failure: bool = Field(True, description="a failed row remap drains the node")
    drain_on_degraded: list[GpuFault] = Field(
        default_factory=list,
        description="conditions of a GPU that runs slow that drain the node while they last (none by"
        " default): " + ", ".join(DEGRADED),
    )
    on_reclaim: OnReclaim = Field(
        OnReclaim.REQUEUE, description="the node's running jobs when the checkpoint episode ends"
    )
    dry_run: bool = Field(
        False, description="log and report what would be done; change nothing in the scheduler"
    )
    resume_after: Duration = Field(
        "2m", ge=0, description="the health gate must hold this long before the agent lifts its own drain"
    )
    notice_expiry: Duration = Field(
        "10m", gt=0, description="a notice still standing this long past its deadline was no reclaim"
    )
    command_timeout: Duration = Field("10s", gt=0, le=300, description="one call's limit (scontrol)")
    poll_interval: Duration = Field("2s", gt=0, le=300, description="how often the node's state is read")
    retry_max: Duration = Field(
        "30s", gt=0, description="the longest wait between retries of a failed action"
    )

    @field_validator("drain_on_degraded")
    @classmethod
    def _degraded_only(cls, v: list[GpuFault]) -> list[GpuFault]:
        other = [str(f) for f in v if f not in DEGRADED]
        if other:
            raise ValueError(
                f"{', '.join(other)}: not a degraded-GPU condition ({', '.join(DEGRADED)}); lost GPUs,"
                " Xids and row remaps have drain_on_lost_gpu, drain_on_xids, drain_on_row_remap_failure"
            )
        return v
