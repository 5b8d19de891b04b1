"""NVML's clocks event (throttle) reasons as one flag set: the ``reason`` label of /metrics, GPU
health's throttle holds and the classifier's notes all read it.

The bits are nvml.h's ``nvmlClocksEventReason*`` (fixed by NVML's ABI), written here rather than read
from pynvml so that the classifier and GPU health, which every daemon runs, do not import nvidia-ml-py
(~2 MB) on a node without GPUs; ``tests/gpu/test_gpu_lazy_binding.py`` holds them equal to pynvml's."""

from __future__ import annotations

from enum import IntFlag


class ClockReason(IntFlag):
    GPU_IDLE = 0x1
    APPLICATIONS_CLOCKS_SETTING = 0x2
    SW_POWER_CAP = 0x4
    HW_SLOWDOWN = 0x8
    SYNC_BOOST = 0x10
    SW_THERMAL_SLOWDOWN = 0x20
    HW_THERMAL_SLOWDOWN = 0x40
    HW_POWER_BRAKE_SLOWDOWN = 0x80
    DISPLAY_CLOCK_SETTING = 0x100

    @property
    def label(self) -> str:
        """``sw_power_cap``: the name in the ``reason`` label."""
        return (self.name or "").lower()


# Plain ints for the hot paths (every GPU every tick and every scrape): ``int & IntFlag`` goes
# through enum's Python-level operators, ~20x an int's.
THERMAL = int(ClockReason.SW_THERMAL_SLOWDOWN | ClockReason.HW_THERMAL_SLOWDOWN)
POWER = int(ClockReason.SW_POWER_CAP | ClockReason.HW_POWER_BRAKE_SLOWDOWN)
# the reasons that mean the GPU is held back (not idle, not an application clock setting)
THROTTLING = int(
    ClockReason.SW_POWER_CAP
    | ClockReason.HW_SLOWDOWN
    | ClockReason.SW_THERMAL_SLOWDOWN
    | ClockReason.HW_THERMAL_SLOWDOWN
    | ClockReason.HW_POWER_BRAKE_SLOWDOWN
)
LABELS: tuple[tuple[int, str], ...] = tuple((int(r), r.label) for r in ClockReason)


def names(bits: int) -> str:
    """``sw_thermal_slowdown,hw_thermal_slowdown``: the reasons set in ``bits``."""
    return ",".join(label for bit, label in LABELS if bits & bit)
