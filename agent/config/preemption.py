"""[preemption]: which cloud's metadata service to watch, and how."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agent.config.types import Duration, StrictModel

Provider = Literal["auto", "alibaba", "aws", "gcp", "azure", "tencent", "none"]


class PreemptionSection(StrictModel):
    provider: Provider = "auto"
    endpoint: str = Field("", description="base URL override, e.g. a local simulator; empty = the cloud's")
    poll_interval: Duration = Field("1s", ge=0.1, le=300)
    timeout: Duration = Field("2s", gt=0, le=60)
