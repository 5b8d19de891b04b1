"""Checkpoint-cadence advice (pure): the Young/Daly interval sqrt(2 * C * MTBI) from the measured
checkpoint cost C and the mean time between interruptions, and what a cadence costs.

With an interval tau, each interval pays one checkpoint (C / tau of the time) and an interruption
loses half an interval on average (tau / 2 / MTBI): the first-order expected overhead is
C / tau + tau / (2 * MTBI), smallest at tau = sqrt(2 * C * MTBI).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Advice:
    cost_seconds: float  # C: how long one checkpoint takes
    cost_source: str  # "periodic saves" | "final checkpoints"
    mtbi_seconds: float
    mtbi_source: str  # "config" | "node history" | "lower bound"
    interval_seconds: float  # the advised interval
    overhead: float  # expected share of GPU time at the advised interval
    current_seconds: float | None  # the job's interval (the larger of its usual gap and the time since)
    current_overhead: float | None
    sparse: bool  # checkpoints far less often than advised

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def overhead(interval: float, cost: float, mtbi: float) -> float:
    if interval <= 0 or mtbi <= 0:
        return 1.0
    return min(1.0, cost / interval + interval / (2.0 * mtbi))


def advise(
    cost: float | None,
    cost_source: str,
    mtbi: float | None,
    mtbi_source: str,
    current: float | None,
    sparse_factor: float,
) -> Advice | None:
    """None until both a checkpoint cost and an interruption rate are known."""
    if cost is None or mtbi is None or cost <= 0 or mtbi <= 0:
        return None
    tau = math.sqrt(2.0 * cost * mtbi)
    return Advice(
        cost_seconds=cost,
        cost_source=cost_source,
        mtbi_seconds=mtbi,
        mtbi_source=mtbi_source,
        interval_seconds=tau,
        overhead=overhead(tau, cost, mtbi),
        current_seconds=current,
        current_overhead=None if current is None else overhead(current, cost, mtbi),
        sparse=current is not None and current > sparse_factor * tau,
    )


def human(seconds: float) -> str:
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    s = round(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def lines(a: Advice | None, why: str) -> list[str]:
    if a is None:
        return [f"cadence: no advice yet ({why})"]
    bound = " (at least: no interruption seen yet)" if a.mtbi_source == "lower bound" else ""
    out = [
        f"cadence: checkpoint every {human(a.interval_seconds)}{bound} "
        f"(Young/Daly: checkpoint {human(a.cost_seconds)}, interruptions every {human(a.mtbi_seconds)} "
        f"[{a.mtbi_source}]), costing {a.overhead:.1%} of GPU time"
    ]
    if a.current_seconds is not None and a.current_overhead is not None:
        flag = "  FAR LESS OFTEN THAN ADVISED" if a.sparse else ""
        out.append(
            f"cadence: the job checkpoints every {human(a.current_seconds)}, "
            f"costing {a.current_overhead:.1%}{flag}"
        )
    return out
