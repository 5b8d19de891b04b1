"""NVML's clocks event (throttle) reasons as one flag set, built from pynvml's own constants: the
``reason`` label of /metrics, GPU health's throttle holds and the classifier's notes all read it."""

from __future__ import annotations

from enum import IntFlag

import pynvml


class ClockReason(IntFlag):
    GPU_IDLE = pynvml.nvmlClocksEventReasonGpuIdle
    APPLICATIONS_CLOCKS_SETTING = pynvml.nvmlClocksEventReasonApplicationsClocksSetting
    SW_POWER_CAP = pynvml.nvmlClocksEventReasonSwPowerCap
    HW_SLOWDOWN = pynvml.nvmlClocksEventReasonHwSlowdown
    SYNC_BOOST = pynvml.nvmlClocksEventReasonSyncBoost
    SW_THERMAL_SLOWDOWN = pynvml.nvmlClocksEventReasonSwThermalSlowdown
    HW_THERMAL_SLOWDOWN = pynvml.nvmlClocksEventReasonHwThermalSlowdown
    HW_POWER_BRAKE_SLOWDOWN = pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    DISPLAY_CLOCK_SETTING = pynvml.nvmlClocksEventReasonDisplayClockSetting

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
