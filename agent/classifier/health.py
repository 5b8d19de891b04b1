"""GPU health shown beside the verdict (pure): lost GPUs, new Xid errors, throttling."""

from __future__ import annotations

from collections.abc import Sequence

from agent.classifier.samples import Sample
from agent.sources.gpu.reasons import ClockReason

_THROTTLE_NAMES = {
    ClockReason.SW_POWER_CAP: "at its power cap",
    ClockReason.HW_SLOWDOWN: "hardware slowdown",
    ClockReason.SW_THERMAL_SLOWDOWN: "thermal throttling (software)",
    ClockReason.HW_THERMAL_SLOWDOWN: "thermal throttling (hardware)",
    ClockReason.HW_POWER_BRAKE_SLOWDOWN: "power brake",
}


def health(window: Sequence[Sample], throttled: dict[tuple[int, int], int]) -> tuple[str, ...]:
    """GPU health shown beside the verdict: lost GPUs, new Xids, throttling in >= 20% of samples."""
    notes: list[str] = []
    last = window[-1]
    first_xids = {g.uuid: g.xids for g in window[0].gpus}
    for g in last.gpus:
        if not g.up:
            notes.append(f"GPU {g.nvml_index} lost (fell off the bus)")
        new = g.xids - first_xids.get(g.uuid, g.xids)
        if new > 0:
            notes.append(f"GPU {g.nvml_index}: {new} Xid error{'s' if new > 1 else ''} in the window")
    n = len(window)
    per_bit: dict[tuple[int, int], int] = {}
    for (index, reasons), count in throttled.items():
        for bit in _BITS:
            if reasons & bit:
                per_bit[(index, bit)] = per_bit.get((index, bit), 0) + count
    for (index, reason), count in sorted(per_bit.items()):
        if count * 5 >= n:
            notes.append(f"GPU {index} {_NAMES[reason]} {count * 100 // n}% of the time")
    return tuple(notes)


def throttle_shares(
    throttled: dict[tuple[int, int], int], index: int, samples: int
) -> tuple[tuple[str, float], ...]:
    """GPU ``index``'s clocks event reasons over its ``samples``: (name, share), largest first."""
    counts: dict[int, int] = {}
    for (gpu, reasons), count in throttled.items():
        if gpu == index:
            for bit in _BITS:
                if reasons & bit:
                    counts[bit] = counts.get(bit, 0) + count
    # NVML sets hw_slowdown with each of its causes (thermal, power brake): on a tie the cause comes first
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0] == _HW_SLOWDOWN, kv[0]))
    return tuple((_NAMES[bit], count / samples) for bit, count in ranked) if samples else ()


# plain ints: flag-enum construction and arithmetic cost microseconds a GPU a sample
_NAMES = {int(b): name for b, name in _THROTTLE_NAMES.items()}
_BITS = tuple(_NAMES)
_HW_SLOWDOWN = int(ClockReason.HW_SLOWDOWN)
