"""Small helpers the sources' status summaries share (rounding, the text view's units)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def rounded(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def human_bytes(v: float | None) -> str:
    if v is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(v) < 1000:
            return f"{v:.1f} {unit}"
        v /= 1000
    return f"{v:.1f} PB"


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def throughput_lines(summarized: Mapping[str, Any], key: str) -> list[str]:
    """``[key]`` and one line per item of a ``{name: {read|rx|tx bytes per second}}`` section."""
    items = summarized.get(key) or {}
    if not items:
        return []
    out = [f"\n[{key}]"]
    for name, v in items.items():
        rx = v.get("read_bytes_per_second", v.get("rx_bytes_per_second"))
        tx = v.get("tx_bytes_per_second")
        line = f"  {name:<24} {'read' if tx is None else 'rx'} {human_bytes(rx)}/s"
        if tx is not None:
            line += f"  tx {human_bytes(tx)}/s"
        out.append(line)
    return out
