"""A measurement -> a 0-1 pressure through its ramp ``[start, full]`` (see agent/config/classifier.py)."""

from __future__ import annotations


def ramp(value: float | None, r: tuple[float, float]) -> float:
    if value is None:
        return 0.0
    start, full = r
    if value <= start:
        return 0.0
    if value >= full:
        return 1.0
    return (value - start) / (full - start)


def per_wait(value: float, share: float) -> float | None:
    """``value`` (a window mean) per unit of the window the GPUs waited, at most 1 when a ratio."""
    return value / share if share > 0 else None
