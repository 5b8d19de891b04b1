"""What share of a tick the training process said it spent saving or evaluating (pure).

A rank's spans of one kind are joined; the node takes the rank that spent the most of the tick in
them (in a data-parallel save one rank writes and the others wait at the barrier: all of them are
held). The wait for input is cumulative only (many short waits): the node's lowest local rank's
seconds and the time of its report, for the classifier to take a share over its window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from agent.core.vocabulary import TrainerSpan
from agent.sources.trainer.part import Said, TrainerPart


@dataclass(frozen=True, slots=True)
class TrainerRates:
    source: ClassVar[str] = "trainer"

    saving: float = 0.0  # share of the tick inside a checkpoint span
    evaluating: float = 0.0  # share of the tick inside an evaluation span
    data_seconds: float | None = None  # the lowest local rank's wait for input since it started
    data_at: float | None = None  # the unix time of that rank's report
    reporting: int = 0  # trainers whose reports carry spans


def covered(said: Said, kind: TrainerSpan, t0: float, t1: float, now: float) -> float:
    """Seconds of [t0, t1] inside ``said``'s spans of ``kind`` (an open one lasts until ``now``)."""
    edges = sorted((a, now if b is None else b) for k, a, b in said.recent if k == kind)
    total, reach = 0.0, t0
    for a, b in edges:
        a, b = max(a, reach), min(b, t1)
        if b > a:
            total += b - a
            reach = b
    return total


def trainer_rates(prev: TrainerPart, cur: TrainerPart, _dt: float) -> TrainerRates:
    t0, t1 = prev.read_at, cur.read_at
    if not cur.said:
        return TrainerRates()
    span = t1 - t0
    saving = evaluating = 0.0
    if span > 0:
        for s in cur.said:
            saving = max(saving, covered(s, TrainerSpan.CHECKPOINT, t0, t1, t1) / span)
            evaluating = max(evaluating, covered(s, TrainerSpan.EVALUATION, t0, t1, t1) / span)
    first = min(cur.said, key=lambda s: s.order)
    return TrainerRates(
        saving=min(1.0, saving),
        evaluating=min(1.0 - min(1.0, saving), evaluating),
        data_seconds=first.totals[TrainerSpan.DATA][1],
        data_at=first.time,
        reporting=len(cur.said),
    )
