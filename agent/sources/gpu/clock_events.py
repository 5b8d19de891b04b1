"""The share of each tick a clocks event reason held, from the driver's cumulative counters where it
keeps them, else from the reason bits sampled at the tick (docs/gpu.md "Clocks event time").

A bit sampled once a tick says what held at that instant: a 200 ms HW slowdown between two ticks is
never seen, and one caught at the instant counts for the whole tick. The counters
(``NVML_FI_DEV_CLOCKS_EVENT_REASON_*``, nanoseconds since the driver loaded, Hopper and later) say how
long each reason held between two reads, whatever happened between them.
"""

from __future__ import annotations

from typing import NamedTuple

import pynvml

from agent.sources.gpu.part import GpuReadingSource
from agent.sources.gpu.reasons import ClockReason

# The field ids are those of the nvidia-ml-py the agent ships (13.x). The first two alias the old
# PERF_POLICY counters (74, 76) in every release; the thermal and power-brake ones are 269-271 there,
# but 251-253 in other published headers (where 269-271 are power-smoothing settings). Under a driver
# that numbers them otherwise, a GPU without power smoothing (before Blackwell) answers NotSupported
# and every reason's share comes from the bits; one with it would answer a setting. Which driver
# branch uses which is not settled without a real driver (docs/gpu.md).
FIELDS: tuple[tuple[ClockReason, int], ...] = (
    (ClockReason.SW_POWER_CAP, getattr(pynvml, "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP", 74)),
    (ClockReason.SYNC_BOOST, getattr(pynvml, "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST", 76)),
    (
        ClockReason.SW_THERMAL_SLOWDOWN,
        getattr(pynvml, "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN", 269),
    ),
    (
        ClockReason.HW_THERMAL_SLOWDOWN,
        getattr(pynvml, "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN", 270),
    ),
    (
        ClockReason.HW_POWER_BRAKE_SLOWDOWN,
        getattr(pynvml, "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN", 271),
    ),
)


class Counted(NamedTuple):
    """One read of a GPU's counters: nanoseconds per reason, and the monotonic time of the read."""

    ns: dict[ClockReason, int]
    at: float


def counters(fields: dict[int, int]) -> dict[ClockReason, int]:
    """The counters among a tick's field values (those the GPU answered)."""
    return {reason: fields[fid] for reason, fid in FIELDS if fid in fields}


def read(ns: dict[ClockReason, int], at: float) -> Counted | None:
    """The counters as one read, or None unless every one answered (a GPU that counts some reasons
    and not others is read from its bits, so that a tick's shares have one source)."""
    return Counted(ns, at) if len(ns) == len(FIELDS) else None


def shares(
    prev: Counted | None, cur: Counted | None, bits: int | None
) -> tuple[dict[ClockReason, float], GpuReadingSource]:
    """Each counted reason's share of the time since the last read, and where it came from: the
    counters' deltas; else (no counters, the first read, a counter that went back after a driver
    reload, no time between the reads) the bits of this instant, 1 or 0 for the whole tick."""
    if prev is not None and cur is not None and cur.at > prev.at and len(prev.ns) == len(cur.ns):
        per_ns = 1.0 / ((cur.at - prev.at) * 1e9)
        before = prev.ns
        out: dict[ClockReason, float] = {}
        for r, n in cur.ns.items():
            d = n - before.get(r, 0)
            if d < 0:  # went back: a driver reload
                break
            out[r] = min(1.0, d * per_ns)
        else:
            return out, GpuReadingSource.COUNTERS
    if bits is None:
        return {}, GpuReadingSource.NONE
    return {r: 1.0 if bits & int(r) else 0.0 for r, _ in FIELDS}, GpuReadingSource.BITS
