"""What rarely changes on a GPU, read every few seconds rather than every tick."""

from __future__ import annotations

from typing import Any, NamedTuple

import pynvml

from agent.sources.gpu.binding import binding
from agent.sources.gpu.nvml import Device, Nvml

# functions an older nvidia-ml-py may lack: they then fail like a driver without them
REMAPPED_ROWS = binding("nvmlDeviceGetRemappedRows")
PCIE_GENERATION = binding("nvmlDeviceGetCurrPcieLinkGeneration")
PCIE_WIDTH = binding("nvmlDeviceGetCurrPcieLinkWidth")
PCIE_GENERATION_MAX = binding("nvmlDeviceGetMaxPcieLinkGeneration")  # the GPU's and the slot's
PCIE_WIDTH_MAX = binding("nvmlDeviceGetMaxPcieLinkWidth")
POWER_DEFAULT_LIMIT = binding("nvmlDeviceGetPowerManagementDefaultLimit")
MAX_CLOCK = binding("nvmlDeviceGetMaxClockInfo")
# The enforced power limit, the ECC counts, row remapping, the PCIe link, the NVLink links
# and the GPU's limits change on an admin's action, a memory error or a link retraining, not tick by
# tick: read every SLOW_SECONDS, and at the next tick after an Xid on that GPU (a memory error raises
# one). They would be two thirds of the NVML calls a GPU costs each tick (more with 18 NVLinks).
SLOW_SECONDS = 5.0
# Each NVLink link's state is a call of its own (18 a tick on an H100): together they cost more than
# all the other slow reads, for a state that changes on a retraining. Read every LINK_SECONDS (half
# the default nvlink_down_hold), and with the slow reads after an Xid (an NVLink error raises one).
LINK_SECONDS = 30.0


class Slow(NamedTuple):
    """The slow reads of one GPU (None: the GPU or driver cannot give it)."""

    power_limit: int | None
    ecc_uncorrected: int | None
    ecc_corrected: int | None
    remapped_rows: Any
    pcie_generation: int | None
    pcie_width: int | None
    pcie_generation_max: int | None
    pcie_width_max: int | None
    nvlinks_active: int | None
    nvlinks: int | None
    power_default_limit: int | None
    sm_clock_max_mhz: int | None


def slow_reads(nvml: Nvml, dev: Device, now: float) -> Slow:
    """What rarely changes, read every SLOW_SECONDS."""
    slow = dev.slow
    if not isinstance(slow, Slow) or now >= dev.slow_at:
        if now >= dev.links_at:  # 0: the first read, or asked again after an Xid
            dev.links_at = now + LINK_SECONDS
            dev.links = nvml.nvlink_active(dev)
        dev.slow_at = now + SLOW_SECONDS  # before the reads: an Xid meanwhile asks again
        read = nvml.read
        active, links = dev.links
        slow = dev.slow = Slow(
            read(dev, pynvml.nvmlDeviceGetEnforcedPowerLimit),
            read(
                dev,
                pynvml.nvmlDeviceGetTotalEccErrors,
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            ),
            # volatile (since the driver loaded), as the uncorrected count: a rate needs only its
            # deltas, and the aggregate (the GPU's lifetime, kept in its infoROM) is not documented
            # to move as each error happens. A driver reload resets it: no rate across that
            read(
                dev,
                pynvml.nvmlDeviceGetTotalEccErrors,
                pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                pynvml.NVML_VOLATILE_ECC,
                name="nvmlDeviceGetTotalEccErrors corrected",  # skipped on its own
            ),
            read(dev, REMAPPED_ROWS),
            read(dev, PCIE_GENERATION),
            read(dev, PCIE_WIDTH),
            read(dev, PCIE_GENERATION_MAX),
            read(dev, PCIE_WIDTH_MAX),
            active,
            links,
            read(dev, POWER_DEFAULT_LIMIT),
            read(dev, MAX_CLOCK, pynvml.NVML_CLOCK_SM),
        )
    return slow
