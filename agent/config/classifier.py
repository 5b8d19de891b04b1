"""[classifier]: bottleneck verdicts (compute, data, network, sync-wait, idle, mixed).

Every threshold the classifier uses lives here. A *ramp* ``[start, full]`` turns a measurement into a
0-1 pressure: below ``start`` it counts nothing, at ``full`` and above it counts fully, linear between.
configs/agent.toml documents each key; docs/classifier.md explains how they combine.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator

from agent.config.types import ByteRate, Duration, StrictModel
from agent.core.vocabulary import Verdict


def _ramp(value: tuple[float, float]) -> tuple[float, float]:
    start, full = value
    if not (0 <= start < full):
        raise ValueError(f"a ramp is [start, full] with 0 <= start < full, got [{start}, {full}]")
    return value


Ramp = Annotated[tuple[float, float], AfterValidator(_ramp)]
# thresholds that put a whole GPU sample in one class, before samples were split into shares
RETIRED = ("busy_sm_active", "busy_power_ratio", "spin_utilization", "starved_utilization")


class ClassifierSection(StrictModel):
    enabled: bool = True
    window: Duration = Field("60s", gt=0, description="sliding window the verdict is computed over")
    evaluate_every: Duration = Field("5s", gt=0)
    min_window_fill: float = Field(
        0.25, gt=0, le=1, description="share of the window that must hold samples before a verdict changes"
    )
    # --- hysteresis ---
    confirmations: int = Field(3, ge=1, le=100, description="consecutive wins a new verdict needs")
    enter_score: float = Field(0.5, gt=0, le=1, description="a class must score this to become the verdict")
    exit_score: float = Field(0.35, ge=0, le=1, description="the current verdict holds while it scores this")
    margin: float = Field(0.1, ge=0, le=1, description="lead over the runner-up; less is `mixed`")
    cause_floor: float = Field(
        0.28,
        gt=0,
        le=1,
        description="one cause holding this share of the time, ahead of every other cause, is the verdict "
        "over the GPUs' work: mixed is for causes that compete, never work against one cause",
    )
    second_cause: float = Field(
        0.1, gt=0, le=1, description="a compute verdict names a cause costing this share of the time"
    )
    warmup: Duration = Field(
        "20s",
        ge=0,
        description="verdict held after a training job starts; its first verdict then needs no confirmations",
    )
    checkpoint_hold_max: Duration = Field(
        "30m", gt=0, description="longest a checkpoint request suppresses verdicts without an answer"
    )
    # --- VerdictEvent for the alerts ---
    sustain: Duration = Field("5m", ge=0, description="a verdict must hold this long before it is published")
    publish: list[Verdict] = Field(
        default_factory=lambda: [Verdict.DATA, Verdict.NETWORK, Verdict.SYNC_WAIT, Verdict.HOST]
    )
    history: int = Field(200, ge=1, le=10000, description="evaluations kept for GET /classifier/history")
    # --- what a GPU sample is ---
    full_work_sm: float = Field(
        0.8,
        gt=0,
        le=1,
        description="SM activity (GPM) per second of kernel time at full work (or a higher learned one)",
    )
    full_work_power: float = Field(
        0.7,
        gt=0,
        le=1,
        description="without GPM: (power - idle) / (limit - idle) at full work (or a higher learned one)",
    )
    idle_power_ratio: float = Field(
        0.2, gt=0, lt=1, description="idle power as a share of the limit until a lower minimum is observed"
    )
    # --- pressures, each a ramp [start, full] ---
    storage_read_utilization: Ramp = (0.6, 0.9)  # disk/NFS read throughput over capacity
    disk_busy: Ramp = (0.7, 0.95)  # share of time the device had I/O in flight
    iowait: Ramp = (0.05, 0.25)  # share of all CPU time in iowait
    psi_io: Ramp = (0.1, 0.5)  # share of time some task stalled on I/O (/proc/pressure/io)
    nfs_rtt_ratio: Ramp = (2.0, 6.0)  # NFS READ RTT over its learned baseline
    nfs_rtt_floor: Duration = Field("2ms", ge=0, description="NFS READ RTT below this never counts")
    trainer_blocked: Ramp = Field(
        (0.2, 0.5),
        description="per second of starvation, the share of time a training process or worker was blocked"
        " in uninterruptible sleep (a read in progress) for host-wide I/O pressure to count as the job's"
        " though it completed no bytes in the window",
    )
    trainer_read_floor: ByteRate = Field(
        "1MB/s",
        description="per second of starvation, the training processes must read this much for host-wide"
        " I/O pressure to count as theirs",
    )
    cpu_saturation: Ramp = (0.7, 0.9)  # trainer + workers CPU over their allowed cores
    # one training process or data-loader worker: cores it ran or waited to run (schedstat)
    cpu_pegged: Ramp = (0.6, 0.85)
    # bytes/s each GPU received over PCIe per second of its starvation: copies holding it (pageable-copy)
    pageable_copy_rx: Ramp = (3e8, 1.5e9)
    network_utilization: Ramp = (0.6, 0.85)  # NIC/RDMA throughput over capacity (or learned ceiling)
    # the traffic itself, for links whose reported speed is only an upper bound (docs/classifier.md):
    network_bulk: Ramp = (0.5e6, 2e6)  # bytes/s moving while the GPUs wait
    network_contrast: Ramp = (1.5, 3.0)  # traffic while the GPUs wait over traffic while they work
    network_steady: Ramp = (0.3, 0.6)  # share of the waits carrying at least half the link's plateau
    rdma_cnp_per_second: Ramp = (100.0, 1000.0)  # CNPs sent + handled
    rdma_xmit_wait_per_second: Ramp = (1e5, 1e7)  # port_xmit_wait ticks
    # --- capacities: configured ones win; the others are learned from observed peaks ---
    disk_capacity: dict[str, ByteRate] = Field(default_factory=dict, description="device -> read bytes/s")
    nfs_capacity: dict[str, ByteRate] = Field(default_factory=dict, description="mountpoint -> bytes/s")
    nic_capacity: dict[str, ByteRate] = Field(default_factory=dict, description="interface -> bytes/s")
    rdma_capacity: dict[str, ByteRate] = Field(default_factory=dict, description='"dev/port" -> bytes/s')
    learn_capacities: bool = True
    learn_floor: ByteRate = Field(
        "5MB/s", description="observed peaks below this are not trusted as a capacity"
    )
    save_every: Duration = Field("1m", gt=0, description="how often learned baselines are written")

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        if isinstance(data, dict):
            old = sorted(k for k in RETIRED if k in data)
            if old:
                raise ValueError(
                    f"{', '.join(old)}: retired: a GPU sample is now split into working, spinning and"
                    " starved shares against the GPU's full-work level (full_work_sm, full_work_power;"
                    " docs/classifier.md)"
                )
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ClassifierSection:
        if self.exit_score > self.enter_score:
            raise ValueError("exit_score must not exceed enter_score (exit sits inside entry)")
        if self.evaluate_every > self.window:
            raise ValueError("evaluate_every must not exceed window")
        return self
