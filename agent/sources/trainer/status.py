"""The trainer source's keys of the status JSON, and its lines in ``training-node-agent status``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.core.projection import Spec, fields
from agent.sources.trainer.part import TrainerPart
from agent.sources.trainer.rates import TrainerRates

TCP_VIEW: dict[str, Spec] = {**fields("trainer_spans")}


def summary(part: TrainerPart, rates: TrainerRates | None) -> dict[str, Any]:
    open_now = sorted({str(k) for s in part.said for k, _, end in s.recent if end is None})
    return {
        "trainer_spans": {
            "reporting": len(part.said),
            "open": open_now,
            "unusable": part.unusable,
            "saving": round(rates.saving, 3) if rates else None,
            "evaluating": round(rates.evaluating, 3) if rates else None,
        }
    }


def lines(summarized: Mapping[str, Any]) -> list[str]:
    t = summarized.get("trainer_spans") or {}
    if not t.get("reporting"):
        return []
    now = f", now in: {', '.join(t['open'])}" if t.get("open") else ""
    return [f"trainer spans: {t['reporting']} trainer(s) tell their saves and evaluations{now}"]
