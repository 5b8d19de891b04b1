"""One host-side shape of waiting, declared once: its evidence, its words and where its time is booked.

A shape explains part of the GPUs' time that is not work (their *spinning* or their *starved*
share) by something the training process does itself. ``pressure`` is how sure the evidence is
(0-1), on the same scale as the data and network pressures, so its score is ``share x pressure``
and it competes with the other classes as they compete with each other. ``reasons`` gives the
numbers that decided it, ``hint`` the remedy, ``remedy`` the ledger's words for its bucket.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, NamedTuple

from agent.core.vocabulary import Bucket, HostSubReason, VerdictReason

if TYPE_CHECKING:
    from agent.classifier.features import Features
    from agent.config.classifier import ClassifierSection

# which of the GPUs' time a shape can take: their spinning or starved share, or "time": a share of
# the whole window, whatever the GPUs did in it (an evaluation loop runs kernels that are no training)
Share = Literal["spinning", "starved", "time"]


class Shape(NamedTuple):
    sub_reason: HostSubReason  # the verdict's label: host/<sub_reason>
    cause: VerdictReason  # training_node_verdict_info's reason, the fleet rules' word
    bucket: Bucket  # where the ledger books the seconds it explains
    explains: Share  # which of the GPUs' waiting shares it can take
    pressure: Callable[[Features, ClassifierSection], float]
    reasons: Callable[[Features], list[str]]
    hint: Callable[[Features], str]
    remedy: str  # the ledger's remedy line for its bucket
    what: str  # what it means, in a few words (docs, the report's legend)
    # whether the ledger books it from the window's pressure (False: from the trainer's own spans,
    # tick by tick, ``agent.ledger.assign``)
    by_pressure: Callable[[Features], bool] = lambda _f: True


class SaveCost(NamedTuple):
    """What the ledger says of a synchronous save the classifier measured (``host/checkpoint``)."""

    per_hour: float | None  # money an hour the saves hold the GPUs, at the configured price
    currency: str
    interval: float | None  # the advised interval for a save that long (Young/Daly, the reclaim risk)
    mtbi: float | None  # the mean time between interruptions it rests on
    mtbi_source: str  # "config" | "node history" | "lower bound"


# (one save's seconds, the saves' share of the time, their period) -> what the ledger says of them;
# handed to the classifier part by the daemon, as the fleet's word on the pace is
SaveView = Callable[[float, float, "float | None"], SaveCost]


SHAPES: dict[HostSubReason, Shape] = {}


def declare(shape: Shape) -> Shape:
    if shape.sub_reason in SHAPES:
        raise ValueError(f"host shape {shape.sub_reason!r} is declared twice")
    SHAPES[shape.sub_reason] = shape
    return shape
