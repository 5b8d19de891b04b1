"""[jobs]: which scheduler job each training process belongs to (the jobs source).

Kept apart from the [scheduler] section (drain, requeue, resume): this one only reads, and works
with no [scheduler] at all (a job's cgroup or environment names it even where scontrol is absent).
"""

from __future__ import annotations

from pydantic import Field

from agent.config.types import Duration, StrictModel


class JobsSection(StrictModel):
    enabled: bool = True
    scontrol: str = Field(
        "scontrol", min_length=1, description="the scontrol program (a name on PATH or a path)"
    )
    node_name: str = Field(
        "",
        pattern=r"^[A-Za-z0-9._-]*$",
        description="deprecated: set [scheduler] node_name, which both read (this one is taken where that"
        " one is empty; the two may not differ)",
    )
    timeout: Duration = Field("5s", gt=0, le=60, description="one scontrol call's limit")
    refresh: Duration = Field(
        "60s", gt=0, description="how long a job's name and user are kept before scontrol is asked again"
    )
    max_jobs: int = Field(256, ge=1, le=100_000, description="jobs remembered at most (oldest forgotten)")
