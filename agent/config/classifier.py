"""[classifier]: bottleneck verdicts."""

from __future__ import annotations

from pydantic import Field

from agent.config.types import Duration, StrictModel


class ClassifierSection(StrictModel):
    enabled: bool = True
    window: Duration = Field("60s", gt=0)
    evaluate_every: Duration = Field("10s", gt=0)
