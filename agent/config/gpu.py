"""[gpu]: NVML telemetry and GPU health events."""

from __future__ import annotations

from pydantic import Field

from agent.config.types import Duration, StrictModel


class GpuSection(StrictModel):
    enabled: bool = True
    library: str = Field("", description="path of libnvidia-ml.so.1; empty = the system's")
    reinit_backoff_max: Duration = Field(
        "60s", gt=0, description="longest wait between attempts to initialise NVML again after a driver error"
    )
    xid_events: bool = Field(True, description="watch Xid critical errors through an NVML event set")
    call_timeout: Duration = Field(
        "2s",
        gt=0,
        description="one GPU's NVML reads of a tick running longer mark that GPU unresponsive, and the"
        " others are read on (at most half of [agent] collector_timeout is used)",
    )
    unresponsive_hold: Duration = Field(
        "10s", ge=0, description="a GPU unresponsive this long raises an unresponsive event"
    )
    kernel_log: str = Field(
        "/dev/kmsg",
        description="read the driver's Xid lines from this kernel log as well, so a hung NVML still raises"
        " them (needs CAP_SYSLOG where kernel.dmesg_restrict=1); empty = NVML's events only",
    )
    process_metrics: bool = Field(True, description="export GPU memory per compute process (label pid)")
    thermal_throttle_hold: Duration = Field(
        "30s", ge=0, description="thermal slowdown lasting this long raises a thermal-throttle event"
    )
    power_throttle_hold: Duration = Field(
        "5m", ge=0, description="power capping lasting this long raises a power-throttle event"
    )
    pcie_degraded_hold: Duration = Field(
        "1m",
        ge=0,
        description="a PCIe link below its max width (or generation, while the GPU works) this long "
        "raises a pcie-degraded event",
    )
    nvlink_down_hold: Duration = Field(
        "1m", ge=0, description="NVLink links down this long raise an nvlink-down event"
    )
    power_limit_hold: Duration = Field(
        "5m", ge=0, description="a power limit below the default this long raises a power-limit-low event"
    )
    row_remap_pending_hold: Duration = Field(
        "0s", ge=0, description="a row remap pending a GPU reset this long raises a row-remap-pending event"
    )
    error_rate_window: Duration = Field(
        "10m",
        gt=0,
        description="the trailing window the corrected ECC and NVLink error rates are counted over",
    )
    ecc_corrected_per_hour: float = Field(
        100.0,
        gt=0,
        description="corrected ECC errors per hour (over error_rate_window) above which the rate is rising",
    )
    ecc_corrected_hold: Duration = Field(
        "5m", ge=0, description="corrected ECC errors rising this long raise an ecc-corrected-rising event"
    )
    nvlink_errors_per_hour: float = Field(
        60.0,
        gt=0,
        description="NVLink replay and recovery errors per hour, all links together (over"
        " error_rate_window), above which they are rising",
    )
    nvlink_errors_hold: Duration = Field(
        "5m",
        ge=0,
        description="NVLink replay and recovery errors rising this long raise an nvlink-errors event",
    )
