"""[trainer]: finding the training processes and asking them to checkpoint."""

from __future__ import annotations

from pydantic import Field

from agent.config.types import StrictModel


class TrainerSection(StrictModel):
    discover: list[str] = Field(default_factory=lambda: ["nvml"])
    signal: str = "SIGUSR1"
    dry_run: bool = False
