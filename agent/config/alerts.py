"""[alerts]: chat webhooks."""

from __future__ import annotations

from typing import Literal

from agent.config.types import StrictModel


class AlertsSection(StrictModel):
    language: Literal["en", "zh-CN"] = "en"
