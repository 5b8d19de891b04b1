"""[goodput]: the ledger of where the GPU-seconds go, its checkpoint-cadence advice and digest."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from agent.config.types import Duration, StrictModel

_CLOCK = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


class GoodputSection(StrictModel):
    enabled: bool = True
    window: Duration = Field("1h", gt=0, description="training_node_goodput_ratio is over this window")
    resolution: Duration = Field("1m", gt=0, le=3600, description="the ledger's time slots")
    settle: Duration = Field(
        "2h",
        ge=0,
        description="slots stay open this long for late facts (periodic saves, work lost at a reclaim);"
        " should exceed the checkpoint interval",
    )
    keep: Duration = Field("8d", gt=0, description="history kept for `report --since`")
    save_every: Duration = Field("30s", gt=0, description="how often the ledger is written to state_dir")
    poll: Duration = Field(
        "2s",
        gt=0,
        le=300,
        description="how often the trainer's checkpoint reports are read (at the first snapshot after it)",
    )
    mtbi: Duration | None = Field(
        None,
        gt=0,
        description="mean time between interruptions (e.g. from the fleet rule); default: node history",
    )
    sparse_factor: float = Field(
        2.0, gt=1, description="a job checkpointing this many times less often than advised is flagged"
    )
    digest: bool = Field(False, description="a daily ledger digest to the chat channels")
    digest_at: str = Field("09:00", description="HH:MM in [alerts] timezone")

    @field_validator("digest_at")
    @classmethod
    def _clock(cls, v: str) -> str:
        if not _CLOCK.match(v):
            raise ValueError(f'expected a time of day like "09:00", got {v!r}')
        return v

    @model_validator(mode="after")
    def _slots(self) -> GoodputSection:
        if self.window < self.resolution:
            raise ValueError("window must be at least one resolution slot")
        return self
