"""[fleet]: what the agent may learn from the fleet's Prometheus (optional, never required)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from agent.config.types import Duration, StrictModel


class FleetSection(StrictModel):
    prometheus_url: str = Field(
        "",
        description="the fleet's Prometheus (http://host:9090); a sync-wait verdict then names the node "
        "that sets the job's pace (the TrainingJobStraggler alert); empty = never asked",
    )
    poll: Duration = Field("15s", ge=1, le=3600, description="how often the alert is looked up")
    timeout: Duration = Field("5s", gt=0, le=30)

    @field_validator("prometheus_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v:
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected http://host:port, got {v!r}")
        return v.rstrip("/")
