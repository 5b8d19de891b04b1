"""Drawing helpers for the report page (pure): the time axis, each bucket's colour and pattern, lines
thinned to the pixels they fill.

Colours are the Okabe-Ito set, told apart by the colour-blind; every band also has a pattern of its
own (stripes at an angle, dots, cross-hatch) and a label in the legend, so the page reads in greyscale
print too. A bucket the palette does not know (one added later) gets the next colour and pattern by
its position: nothing here lists the buckets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape

# Okabe & Ito (2008): distinguishable under the common colour-vision deficiencies
PALETTE = ("#009E73", "#E69F00", "#56B4E9", "#D55E00", "#CC79A7", "#0072B2", "#F0E442", "#999999", "#000000")
# a pattern per position, drawn over the colour: (kind, angle)
PATTERNS = (
    ("solid", 0),
    ("stripes", 45),
    ("stripes", -45),
    ("dots", 0),
    ("stripes", 0),
    ("cross", 45),
    ("stripes", 90),
    ("cross", 0),
    ("dots", 45),
    ("stripes", 22),
    ("stripes", -22),
)
# the line styles of the input/link chart and the per-GPU charts, told apart without colour
DASHES = ("", "6 3", "2 2", "8 3 2 3")


def fill_of(index: int) -> str:
    """The fill of the ``index``-th band: its pattern (which carries its colour)."""
    return f"url(#pat{index})"


def colour_of(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def patterns(count: int) -> str:
    """``<defs>`` with one pattern per band position (colour underneath, marks over it)."""
    out = ["<defs>"]
    for i in range(count):
        kind, angle = PATTERNS[i % len(PATTERNS)]
        colour = colour_of(i)
        over = ""
        if kind == "stripes":
            over = '<rect x="0" y="0" width="3" height="8" fill="#fff" fill-opacity="0.55"/>'
        elif kind == "dots":
            over = '<circle cx="4" cy="4" r="1.6" fill="#fff" fill-opacity="0.7"/>'
        elif kind == "cross":
            over = (
                '<rect x="0" y="0" width="2" height="8" fill="#fff" fill-opacity="0.55"/>'
                '<rect x="0" y="0" width="8" height="2" fill="#fff" fill-opacity="0.55"/>'
            )
        out.append(
            f'<pattern id="pat{i}" width="8" height="8" patternUnits="userSpaceOnUse"'
            f' patternTransform="rotate({angle})"><rect width="8" height="8" fill="{colour}"/>{over}'
            "</pattern>"
        )
    out.append("</defs>")
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Axis:
    """Wall time ``t0``-``t1`` onto ``x0``-``x0 + width`` pixels."""

    t0: float
    t1: float
    x0: float
    width: float

    def x(self, t: float) -> float:
        span = self.t1 - self.t0
        return self.x0 + (t - self.t0) / span * self.width if span > 0 else self.x0

    def ticks(self, count: int = 6) -> list[float]:
        span = self.t1 - self.t0
        if span <= 0:
            return [self.t0]
        step = nice_step(span / count)
        first = math.ceil(self.t0 / step) * step
        return [first + i * step for i in range(int((self.t1 - first) / step) + 1)]


STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def nice_step(seconds: float) -> float:
    for s in STEPS:
        if s >= seconds:
            return float(s)
    return 86400.0 * math.ceil(seconds / 86400.0)


def thin(points: Iterable[tuple[float, float | None]], axis: Axis, pixels: int) -> list[tuple[float, float]]:
    """(t, value) pairs as at most one mean per pixel column: a week of seconds draws as a line of
    the chart's width, not of 600,000 points. None (no reading) is left out."""
    sums: dict[int, list[float]] = {}
    for t, v in points:
        if v is None:
            continue
        col = int((axis.x(t) - axis.x0) / axis.width * pixels) if axis.width else 0
        s = sums.setdefault(col, [0.0, 0.0, t])
        s[0] += v
        s[1] += 1
        s[2] = t
    return [(s[2], s[0] / s[1]) for _, s in sorted(sums.items())]


def polyline(
    pts: Sequence[tuple[float, float]], axis: Axis, y0: float, height: float, top: float, **attrs: str
) -> str:
    """A line of (t, value) with value ``top`` at ``y0`` and 0 at ``y0 + height``."""
    if not pts:
        return ""
    scale = height / top if top > 0 else 0.0
    coords = " ".join(f"{axis.x(t):.1f},{y0 + height - min(v, top) * scale:.1f}" for t, v in pts)
    extra = "".join(f' {k.replace("_", "-")}="{escape(v)}"' for k, v in attrs.items())
    return f'<polyline points="{coords}" fill="none"{extra}/>'
