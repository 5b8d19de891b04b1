"""[gpu]: NVML."""

from __future__ import annotations

from pydantic import Field

from agent.config.types import Duration, StrictModel


class GpuSection(StrictModel):
    enabled: bool = True
    library: str = Field("", description="path of libnvidia-ml.so.1; empty = the system's")
    reinit_backoff_max: Duration = Field("60s", gt=0)
