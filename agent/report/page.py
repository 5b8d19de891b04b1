"""The report page (pure): :class:`PageData` in, one self-contained HTML string out.

No script, no fetch, no font or stylesheet from elsewhere: inline SVG and CSS, so the file can be
mailed to someone without access to the node and read offline or printed. The bands are drawn from
whatever buckets the data names (the ledger's ``Bucket`` list, in its order), so a bucket added to the
vocabulary shows up here without a change. Every drawn figure carries what it stands for in ``data-``
attributes (a band its GPU-seconds, a mark its time), which the browser test reads back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Any

from agent.ledger.cadence import human
from agent.report import sections
from agent.report.data import PageData
from agent.report.svg import Axis, fill_of, patterns
from agent.report.timeline import Mark, MarkKind

MAX_COLUMNS = 600  # the timeline's bands: at most this many columns, however long the period
WIDTH = 1000  # the timeline's plot, in SVG pixels
X0 = 60  # left margin (the axis' labels)
BAND_HEIGHT = 220
MARK_ROWS = 3  # verdict labels staggered over this many rows


@dataclass(frozen=True, slots=True)
class Column:
    start: float
    seconds: float  # wall seconds of the period it covers
    gpu_seconds: tuple[float, ...]  # per bucket


def columns(data: PageData) -> list[Column]:
    """The ledger's slots merged into at most ``MAX_COLUMNS``, each clipped to the period. A tick
    books the time since the tick before it into its own slot, so a slot no tick fell in (the agent
    stalled longer than a slot) is booked in the next one: each column reaches back to where the
    one before it ended, and their seconds add up to the time the ledger covers, without a gap. The
    last reaches on to the period's end, "now": the time since the last tick is the open slot's, which
    the next tick books."""
    span = data.until - data.since
    res = data.resolution
    width = max(res, math.ceil(span / MAX_COLUMNS / res) * res) if span > 0 else res
    merged: dict[int, list[Any]] = {}
    n = len(data.buckets)
    for start, secs in data.slots:
        lo, hi = max(start, data.since), min(start + res, data.until)
        if hi <= lo:
            continue
        key = math.floor((start - data.since) / width)
        c = merged.setdefault(key, [lo, hi, [0.0] * n])
        c[0], c[1] = min(c[0], lo), max(c[1], hi)
        for i, x in enumerate(secs):
            c[2][i] += x
    out: list[Column] = []
    for _, (lo, hi, secs) in sorted(merged.items()):
        start = out[-1].start + out[-1].seconds if out else lo
        out.append(Column(start, hi - start, tuple(secs)))
    if out and out[-1].start + out[-1].seconds < data.until:
        # 1 s slots and a page made 0.16 s after the last one ended left the demo's columns short
        last = out[-1]
        out[-1] = Column(last.start, data.until - last.start, last.gpu_seconds)
    return out


def build_page(data: PageData, advice: dict[str, Any] | None = None) -> str:
    """The page; ``advice`` (the instance advice, ``agent/advice/``'s JSON shape) goes last, and only
    where given."""
    axis = Axis(data.since, data.until, X0, WIDTH)
    body = [
        sections.header(data),
        _timeline(data, axis),
        sections.money(data),
        sections.remedy(data),
        sections.gpus(data, axis),
        sections.links(data, axis),
    ]
    if advice:
        body.append(sections.advice(advice))
    title = f"training-node-agent report: {data.node}" + (f", job {data.job}" if data.job else "")
    return (
        "<!doctype html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f'<meta name="generator" content="training-node-agent {escape(data.version)}">'
        f"<style>{sections.CSS}</style></head>\n<body>\n"
        + "\n".join(b for b in body if b)
        + f"\n<footer>made {_iso(data.made_at)} by training-node-agent {escape(data.version)}</footer>"
        "\n</body></html>\n"
    )


def _timeline(data: PageData, axis: Axis) -> str:
    cols = columns(data)
    top = 18 * MARK_ROWS + 10
    height = top + BAND_HEIGHT + 40
    covered = sum(c.seconds for c in cols)
    out = [
        '<section id="timeline"><h2>Where the GPU time went, over time</h2>',
        f'<svg role="img" aria-label="timeline" width="{X0 + WIDTH + 20}" height="{height}"'
        f' viewBox="0 0 {X0 + WIDTH + 20} {height}" data-since="{data.since:.3f}"'
        f' data-until="{data.until:.3f}" data-covered-seconds="{covered:.3f}" data-plot-width="{WIDTH}">',
        patterns(len(data.buckets)),
        f'<rect x="{X0}" y="{top}" width="{WIDTH}" height="{BAND_HEIGHT}" fill="#fff" stroke="#888"/>',
    ]
    for c in cols:
        out.append(_column(data, axis, c, top))
    out.append(_axis(axis, top + BAND_HEIGHT))
    out.append(_marks(data.marks, axis, top))
    out.append("</svg>")
    out.append(sections.legend(data.buckets))
    out.append(
        f"<p class=note>Each column is one stretch of {human(cols[0].seconds if cols else data.resolution)}"
        " or more: its bands are the shares of the node's GPU-seconds booked to each bucket. Marks above:"
        " ▼ verdict change, ● checkpoint, ◆ reclaim notice, ✕ GPU fault.</p></section>"
    )
    return "\n".join(out)


def _column(data: PageData, axis: Axis, c: Column, top: float) -> str:
    x0, x1 = axis.x(c.start), axis.x(c.start + c.seconds)
    total = sum(c.gpu_seconds)
    parts = [
        f'<g class="col" shape-rendering="crispEdges" data-start="{c.start:.3f}"'
        f' data-seconds="{c.seconds:.3f}" data-gpu-seconds="{total:.3f}" data-x="{x0:.3f}"'
        f' data-width="{x1 - x0:.3f}">'
    ]
    y = top + BAND_HEIGHT
    if total <= 0:
        parts.append(
            f'<rect class="band" data-bucket="" data-height="{BAND_HEIGHT}" x="{x0:.2f}" y="{top}"'
            f' width="{x1 - x0:.2f}" height="{BAND_HEIGHT}" fill="#eee"><title>no GPU time</title></rect>'
        )
    for i, (bucket, secs) in enumerate(zip(data.buckets, c.gpu_seconds, strict=True)):
        if secs <= 0:
            continue
        h = secs / total * BAND_HEIGHT
        y -= h
        parts.append(
            f'<rect class="band" data-bucket="{escape(bucket)}" data-gpu-seconds="{secs:.3f}"'
            f' data-height="{h:.4f}" x="{x0:.2f}" y="{y:.2f}" width="{x1 - x0:.2f}" height="{h:.2f}"'
            f' fill="{fill_of(i)}"><title>{escape(bucket)}: {secs / total:.0%}</title></rect>'
        )
    parts.append("</g>")
    return "".join(parts)


def _axis(axis: Axis, y: float) -> str:
    out = []
    span = axis.t1 - axis.t0
    fmt = "%H:%M:%S" if span < 600 else "%H:%M" if span < 86400 else "%m-%d %H:%M"
    for t in axis.ticks():
        x = axis.x(t)
        label = datetime.fromtimestamp(t, UTC).strftime(fmt)
        out.append(
            f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 5}" stroke="#333"/>'
            f'<text x="{x:.1f}" y="{y + 18}" text-anchor="middle" class="tick">{label}</text>'
        )
    out.append(f'<text x="{axis.x0}" y="{y + 34}" class="tick">UTC</text>')
    return "".join(out)


SHAPES: dict[str, str] = {
    MarkKind.VERDICT: "M{x},{y} l-5,-8 h10 z",
    MarkKind.CHECKPOINT: "M{x},{y} m-4,-4 a4,4 0 1,0 8,0 a4,4 0 1,0 -8,0",
    MarkKind.RECLAIM: "M{x},{y} l-5,-6 l5,-6 l5,6 z",
    MarkKind.GPU_FAULT: "M{x},{y} m-4,-8 l8,8 m0,-8 l-8,8",
}


def _marks(marks: Sequence[Mark], axis: Axis, top: float) -> str:
    out = []
    row = 0
    for m in marks:
        if not axis.t0 <= m.t <= axis.t1:
            continue
        x = axis.x(m.t)
        shape = SHAPES.get(m.kind, SHAPES[MarkKind.VERDICT])
        dash = "" if m.kind == MarkKind.VERDICT else ' stroke-dasharray="3 3"'
        y = top - 2
        label = ""
        if m.kind == MarkKind.VERDICT:
            ly = 14 + 18 * row
            row = (row + 1) % MARK_ROWS
            # a label near the right edge ends at its mark instead of running off the picture
            end = x > axis.x0 + axis.width - 80
            at = f'x="{x - 3:.1f}" text-anchor="end"' if end else f'x="{x + 3:.1f}"'
            label = f'<text {at} y="{ly}" class="mark-label">{escape(m.label)}</text>'
        out.append(
            f'<g class="mark" data-kind="{escape(m.kind)}" data-t="{m.t:.3f}" data-x="{x:.3f}"'
            f' data-label="{escape(m.label)}"><title>{_iso(m.t)} {escape(m.label)}'
            f"{': ' + escape(m.detail) if m.detail else ''}</title>"
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + BAND_HEIGHT}" stroke="#222"'
            f' stroke-width="1"{dash}/>'
            f'<path d="{shape.format(x=f"{x:.1f}", y=f"{y:.1f}")}" fill="#222" stroke="#222"/>{label}</g>'
        )
    return "".join(out)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
