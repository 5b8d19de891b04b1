"""Small pieces of the ``top`` screen: bars, sparklines, number formats, and fitting sections into a
height. Pure functions of their arguments."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text

from agent.sources.gpu.reasons import LABELS as CLOCK_LABELS

GB = 1e9
_EIGHTHS = " ▏▎▍▌▋▊▉"
_SPARKS = "▁▂▃▄▅▆▇█"
# the reasons that cost speed, in the short form a GPU row has room for (idle, sync boost, display
# and application clock settings are not a slowdown of work)
_THROTTLE_SHORT = {
    "sw_power_cap": "pwr-cap",
    "hw_slowdown": "hw-slow",
    "sw_thermal_slowdown": "sw-therm",
    "hw_thermal_slowdown": "HW-THERM",
    "hw_power_brake_slowdown": "pwr-brake",
}


@dataclass(frozen=True, slots=True)
class View:
    width: int
    height: int | None  # None: as many lines as there are (one frame to a pipe)
    now: float = field(default_factory=time.time)
    detail: bool = False  # ``g``: a second line per GPU
    help: bool = False  # ``h``
    error: str | None = None  # the last refresh failed: said in the header over the last good status
    request_file: bool | None = None  # whether the checkpoint request file exists right now


def section(st: dict[str, Any], name: str) -> dict[str, Any]:
    """A part's status section; {} when the part is off or its section is not a table."""
    sec = st.get(name)
    return sec if isinstance(sec, dict) else {}


def bar(ratio: float | None, width: int, style: str) -> Text:
    """``▕████▌    ▏``: the ratio in eighths of a cell; a dim dot row when unknown."""
    if width <= 0:
        return Text("")
    if ratio is None:
        return Text("▕" + "·" * width + "▏", style="dim")
    eighths = round(max(0.0, min(1.0, ratio)) * width * 8)
    full, part = divmod(eighths, 8)
    body = "█" * full + (_EIGHTHS[part] if part else "")
    t = Text("▕", style="dim")
    t.append(body.ljust(width), style=style)
    t.append("▏", style="dim")
    return t


def sparkline(values: Sequence[float], width: int, top: float | None = None) -> str:
    """The last ``width`` values (each cell the highest of the samples it covers when there are more
    samples than cells), scaled to ``top`` (the capacity) or else to the highest value shown."""
    if width <= 0 or not values:
        return ""
    vals = list(values)
    if len(vals) > width:
        step = len(vals) / width
        vals = [max(vals[int(i * step) : max(int(i * step) + 1, int((i + 1) * step))]) for i in range(width)]
    scale = top or max(vals) or 1.0
    out = []
    for v in vals:
        r = max(0.0, min(1.0, v / scale))
        out.append(" " if v <= 0 else _SPARKS[min(len(_SPARKS) - 1, int(r * len(_SPARKS)))])
    return "".join(out)


def pct(v: float | None) -> str:
    return "  -%" if v is None else f"{v * 100:3.0f}%"


def bytes_rate(v: float | None) -> str:
    if v is None:
        return "-"
    for unit in ("B/s", "kB/s", "MB/s", "GB/s"):
        if abs(v) < 1000:
            return f"{v:.0f} {unit}" if unit == "B/s" else f"{v:.1f} {unit}"
        v /= 1000
    return f"{v:.1f} TB/s"


def countdown(seconds: float) -> str:
    """``04:51``: whole seconds, rounded up (the deadline has not come while it shows 00:01)."""
    s = max(0, math.ceil(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


def throttle_names(mask: int) -> list[str]:
    return [_THROTTLE_SHORT[label] for bit, label in CLOCK_LABELS if mask & bit and label in _THROTTLE_SHORT]


def fit(sections: Sequence[tuple[list[Text], int]], height: int | None, width: int) -> list[Text]:
    """Sections in priority order, each (lines, the lines it needs at least), into ``height`` lines:
    every section first gets its minimum (while there is room), then the leftover goes to them in
    order. A cut section says how many of its lines are hidden. Each line is cut to ``width``."""
    if height is None:
        chosen = [list(lines) for lines, _ in sections]
    else:
        left = height
        take = []
        for lines, least in sections:
            n = min(len(lines), least, left)
            take.append(n)
            left -= n
        for i, (lines, _) in enumerate(sections):
            extra = min(len(lines) - take[i], left)
            take[i] += extra
            left -= extra
        chosen = []
        for (lines, least), n in zip(sections, take, strict=True):
            kept = list(lines[:n])
            if least < n < len(lines):  # the note never takes the place of a line the section needs
                kept[-1] = Text(f"   … {len(lines) - n + 1} more (a taller terminal shows them)", style="dim")
            chosen.append(kept)
    out = [line for lines in chosen for line in lines]
    for line in out:
        line.no_wrap = True
        line.truncate(width, overflow="ellipsis")
    return out


def side_by_side(left: list[Text], right: list[Text], lw: int) -> list[Text]:
    out = []
    for i in range(max(len(left), len(right))):
        t = left[i].copy() if i < len(left) else Text()
        t.pad_right(max(0, lw - t.cell_len))
        t.append("│", style="dim")
        if i < len(right):
            t.append_text(right[i])
        out.append(t)
    return out
