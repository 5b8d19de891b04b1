"""What the report page is made from: plain data, filled by ``gather`` from the running agent (or by a
test or the benchmark by hand)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.report.timeline import Mark, Point


@dataclass
class PageData:
    """Everything the page shows; the report room's ``gather`` fills it from the running agent."""

    node: str
    since: float
    until: float
    version: str
    made_at: float
    buckets: Sequence[str]  # the ledger's buckets, in its order
    resolution: float  # the ledger's slot
    slots: Sequence[tuple[float, Sequence[float]]]  # (start, GPU-seconds per bucket), oldest first
    summary: dict[str, Any]  # the ledger's summary over the period (agent.ledger.summary.summarize)
    job: str | None = None
    job_name: str | None = None
    instance: dict[str, Any] | None = None  # id, type, cloud, market: what the node knows of itself
    points: Sequence[Point] = ()
    marks: Sequence[Mark] = ()
    gpu_models: dict[int, str] = field(default_factory=dict)
    reclaims: Sequence[dict[str, Any]] = ()
