"""The report page's sections below the timeline (pure): what the page is about, the money per
bucket, the top remedy and the cadence advice, the GPUs, the inputs and links, the instance advice."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

from agent.ledger.cadence import human
from agent.report.data import PageData
from agent.report.svg import DASHES, Axis, fill_of, polyline, thin
from agent.report.timeline import IO_KINDS
from agent.sources.gpu.reasons import ClockReason

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#111;
background:#fff;margin:16px 24px;max-width:1120px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 6px;border-bottom:1px solid #bbb}
table{border-collapse:collapse;font-size:13px}td,th{padding:2px 8px;text-align:right}
th{border-bottom:1px solid #888}td.l,th.l{text-align:left}tr.total td{border-top:1px solid #888;
font-weight:600}.note{font-size:12px;color:#444}.tick{font-size:11px;fill:#333}.mark-label{font-size:11px;
fill:#111}.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin:4px 0 0 60px}
.legend span{display:inline-flex;align-items:center;gap:4px}dl{display:grid;grid-template-columns:
max-content auto;gap:2px 12px;font-size:13px;margin:6px 0}dt{color:#555}dd{margin:0}
.big{font-size:28px;font-weight:700}.gpu{margin:4px 0 10px}footer{margin-top:24px;font-size:11px;
color:#555}@media print{body{margin:0}section{break-inside:avoid}}
"""


def header(data: PageData) -> str:
    about = f"job {data.job}" + (f" ({data.job_name})" if data.job_name else "") if data.job else "the node"
    rows = [("node", data.node), ("about", about)]
    inst = data.instance or {}
    if inst:
        words = ", ".join(f"{k} {v}" for k, v in inst.items() if v)
        rows.append(("instance", words or "not known"))
    rows.append(("period", f"{_iso(data.since)} to {_iso(data.until)} ({human(data.until - data.since)})"))
    rows.append(("agent", f"training-node-agent {data.version}"))
    rows.append(("made", _iso(data.made_at)))
    ratio = data.summary.get("ratio")
    good = f"{ratio:.1%}" if ratio is not None else "nothing booked"
    return (
        f"<header><h1>Where the GPU time and money went: {escape(data.node)}</h1>"
        + _dl(rows)
        + f'<p>goodput <span class="big" id="goodput" data-ratio="{ratio if ratio is not None else ""}">'
        f"{good}</span> of {data.summary.get('gpu_seconds', 0) / 3600:.2f} GPU-hours</p></header>"
    )


def legend(buckets: Sequence[str]) -> str:
    items = "".join(
        f'<span><svg width="18" height="12"><rect width="18" height="12" fill="{fill_of(i)}"'
        f' stroke="#333"/></svg>{escape(b)}</span>'
        for i, b in enumerate(buckets)
    )
    return f'<div class="legend">{items}</div>'


def money(data: PageData) -> str:
    s = data.summary
    total = s.get("gpu_seconds") or 0.0
    cost = s.get("cost")
    head = '<tr><th class="l">bucket</th><th>GPU-hours</th><th>share</th>'
    head += f"<th>{escape(str(cost['currency']))}</th></tr>" if cost else "</tr>"
    rows = [head]
    for i, b in enumerate(data.buckets):
        secs = s["buckets"].get(b, 0.0)
        m = cost["buckets"].get(b, 0.0) if cost else None
        rows.append(
            f'<tr class="bucket" data-bucket="{escape(b)}" data-gpu-seconds="{secs:.3f}"'
            f' data-money="{"" if m is None else f"{m:.4f}"}"><td class="l"><svg width="14" height="10">'
            f'<rect width="14" height="10" fill="{fill_of(i)}" stroke="#333"/></svg> {escape(b)}</td>'
            f"<td>{secs / 3600:.3f}</td><td>{secs / total if total else 0:.1%}</td>"
            + (f"<td>{m:.2f}</td></tr>" if m is not None else "</tr>")
        )
    rows.append(
        f'<tr class="total" data-gpu-seconds="{total:.3f}" data-money="{cost["total"] if cost else ""}">'
        f'<td class="l">total</td><td>{total / 3600:.3f}</td><td></td>'
        + (f"<td>{cost['total']:.2f}</td></tr>" if cost else "</tr>")
    )
    note = ""
    if cost:
        note = f"spent {cost['total']:.2f} {escape(str(cost['currency']))}, wasted {cost['wasted']:.2f}"
        if cost.get("market"):
            price = cost.get("instance_hour_price")
            # the price is [cost]'s, as configured: the page says so rather than pass it off as a quote
            shown = price if price is not None else "?"
            note += f" ({escape(str(cost['market']))}, {shown} per instance-hour as configured in [cost]"
            note += f", {escape(str(cost['instance_type']))})" if cost.get("instance_type") else ")"
        if cost.get("spot_saving"):
            note += f"; spot saved {cost['spot_saving']:.2f} against on-demand"
    else:
        note = "cost: no price configured ([cost] instance_hour_price or [cost.prices])"
    return (
        '<section id="money"><h2>GPU-seconds and money per bucket</h2><table>'
        + "".join(rows)
        + f'</table><p class="note">{note}</p></section>'
    )


def remedy(data: PageData) -> str:
    s = data.summary
    out = ['<section id="remedy"><h2>What to change</h2>']
    top = s.get("top_waste")
    if top:
        secs = s["buckets"].get(top, 0.0)
        share = secs / s["gpu_seconds"] if s.get("gpu_seconds") else 0.0
        cost = s.get("cost")
        money = f", {cost['buckets'].get(top, 0.0):.2f} {escape(str(cost['currency']))}" if cost else ""
        out.append(
            f'<p id="top-remedy" data-bucket="{escape(top)}"><b>Top remedy ({escape(top)}: '
            f"{secs / 3600:.3f} GPU-hours, {share:.1%} of the time{money})</b>:"
            f" {escape(s.get('remedy') or '')}</p>"
        )
    else:
        out.append("<p>Nothing wasted in this period.</p>")
    out += [f'<p class="cadence">{escape(line)}</p>' for line in s.get("cadence_lines") or []]
    for r in data.reclaims:
        what = "drill" if r.get("drill") else "reclaim"
        if r.get("lost_gpu_seconds"):
            verb = "would lose" if r.get("drill") else "lost"
            line = f"{what} {r.get('event_id')} at {_iso(r['at'])}: final checkpoint missed, {verb}"
            line += f" {human(r.get('lost_seconds') or 0.0)} of work"
        else:
            line = (
                f"{what} {r.get('event_id')} at {_iso(r['at'])}: final checkpoint acknowledged, nothing lost"
            )
        out.append(f'<p class="reclaim">{escape(line)}</p>')
    out.append("</section>")
    return "".join(out)


GPU_CHART = 70


def gpus(data: PageData, axis: Axis) -> str:
    count = max((len(p.gpus) for p in data.points), default=0)
    if not count:
        return '<section id="gpus"><h2>GPUs</h2><p>No GPU readings in this period.</p></section>'
    out = [
        '<section id="gpus"><h2>GPUs: real work against utilization</h2><p class="note">solid: real work'
        " (SM activity); dashed: utilization (a kernel ran). Utilization far above real work is"
        " spinning. Bars under each chart: clocks events other than idle.</p>"
    ]
    for i in range(count):
        out.append(_gpu(data, axis, i))
    out.append("</section>")
    return "".join(out)


def _gpu(data: PageData, axis: Axis, i: int) -> str:
    mine = [(p, p.gpus[i]) for p in data.points if i < len(p.gpus)]
    work = thin(((p.t, g.work) for p, g in mine), axis, int(axis.width))
    util = thin(((p.t, g.util) for p, g in mine), axis, int(axis.width))
    peak = max((g.mem for _, g in mine if g.mem is not None), default=None)
    card = max((g.mem_total for _, g in mine if g.mem_total is not None), default=None)
    seen = 0
    bars = []
    for p, g in mine:
        busy = g.clocks & ~ClockReason.GPU_IDLE
        seen |= busy
        if busy:
            x0, x1 = axis.x(p.t - p.span), axis.x(p.t)
            bars.append(
                f'<rect x="{x0:.1f}" y="{GPU_CHART + 4}" width="{max(1.0, x1 - x0):.1f}" height="5"/>'
            )
    names = ", ".join(r.label for r in ClockReason if r & seen) or "none"
    mem = "memory: no reading"
    if peak is not None:
        mem = f"memory peak {peak / 2**30:.1f} GiB"
        if card:
            mem += f" of {card / 2**30:.1f} GiB ({peak / card:.0%})"
    model = data.gpu_models.get(i, "")
    bar = ""
    if peak is not None and card:
        bar = (
            '<svg width="120" height="10" class="mem">'
            '<rect width="120" height="10" fill="#fff" stroke="#333"/>'
            f'<rect width="{120 * min(1.0, peak / card):.1f}" height="10" fill="#0072B2"/></svg>'
        )
    h = GPU_CHART + 12
    return (
        f'<div class="gpu" data-gpu="{i}" data-mem-peak="{peak if peak is not None else ""}"'
        f' data-mem-total="{card if card is not None else ""}" data-clocks="{names}">'
        f"<b>GPU {i}</b> {escape(model)} · {mem} {bar} · clocks events: {escape(names)}<br>"
        f'<svg width="{axis.x0 + axis.width + 20}" height="{h}">'
        f'<rect x="{axis.x0}" y="0" width="{axis.width}" height="{GPU_CHART}" fill="#fff" stroke="#888"/>'
        f'<text x="{axis.x0 - 4}" y="10" text-anchor="end" class="tick">100%</text>'
        f'<text x="{axis.x0 - 4}" y="{GPU_CHART}" text-anchor="end" class="tick">0</text>'
        + polyline(work, axis, 0, GPU_CHART, 1.0, stroke="#0072B2", stroke_width="1.6")
        + polyline(
            util, axis, 0, GPU_CHART, 1.0, stroke="#D55E00", stroke_width="1.2", stroke_dasharray="5 3"
        )
        + f'<g fill="#CC79A7">{"".join(bars)}</g></svg></div>'
    )


LINK_CHART = 110
PAD = 8  # room above the chart for its top label


FLOOR = 3.0  # the inputs' chart is drawn from 1 kB/s (10^3) up, on a log scale


def links(data: PageData, axis: Axis) -> str:
    """Disk, NFS, NIC and RDMA on one log scale: a 9 GB/s RDMA link and a 40 MB/s disk both read."""
    series = {
        k: thin(((p.t, _decades(p.io[j])) for p in data.points), axis, int(axis.width))
        for j, k in enumerate(IO_KINDS)
    }
    top = math.ceil(max((v for pts in series.values() for _, v in pts), default=0.0))
    if top <= 0:
        return (
            '<section id="links"><h2>Disk, NFS, NIC, RDMA</h2><p>No throughput in this period.</p></section>'
        )
    out = [
        '<section id="links"><h2>Disk, NFS, NIC, RDMA</h2>',
        f'<svg width="{axis.x0 + axis.width + 60}" height="{PAD + LINK_CHART + 10}">',
        f'<rect x="{axis.x0}" y="{PAD}" width="{axis.width}" height="{LINK_CHART}"'
        ' fill="#fff" stroke="#888"/>',
    ]
    for d in range(top + 1):
        y = PAD + LINK_CHART - d / top * LINK_CHART
        out.append(
            f'<line x1="{axis.x0}" x2="{axis.x0 + axis.width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{axis.x0 - 4}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
            f"{_rate(10 ** (d + FLOOR))}</text>"
        )
    colours = ("#0072B2", "#D55E00", "#009E73", "#CC79A7")
    for j, kind in enumerate(IO_KINDS):
        pts = series[kind]
        if not pts:
            continue
        dash = DASHES[j] or "none"
        out.append(
            polyline(
                pts,
                axis,
                PAD,
                LINK_CHART,
                top,
                stroke=colours[j],
                stroke_width="1.5",
                stroke_dasharray=dash,
                data_kind=kind,
            )
        )
        t, v = pts[-1]
        y = PAD + LINK_CHART - v / top * LINK_CHART + 4
        out.append(f'<text x="{axis.x(t) + 4:.1f}" y="{y:.1f}" class="tick">{kind}</text>')
    out.append("</svg>")
    out.append(
        '<p class="note">bytes per second on a log scale, summed over the node\'s devices: disk reads,'
        " NFS reads, NIC received and RDMA received (solid, dashed, dotted, dash-dot in that order).</p>"
        "</section>"
    )
    return "".join(out)


def _decades(v: float | None) -> float | None:
    return None if v is None else max(0.0, math.log10(max(v, 1.0)) - FLOOR)


def advice(a: dict[str, Any]) -> str:
    """The instance advice (``agent/advice/``'s JSON), last on the page."""
    inst = a.get("instance") or {}
    out = ['<section id="advice"><h2>What to rent next time</h2>']
    if inst:
        words = ", ".join(f"{k} {inst[k]}" for k in ("id", "cloud", "card", "gpus", "source") if inst.get(k))
        out.append(f"<p>this instance: {escape(words)}</p>")
    if a.get("binds"):
        out.append(f"<p>the job is bound by <b>{escape(str(a['binds']))}</b></p>")
    out += [f'<p class="advice-line">{escape(str(line))}</p>' for line in a.get("lines") or []]
    cands = a.get("candidates") or []
    if cands:
        rows = [
            '<tr><th class="l">instance</th><th class="l">cloud</th><th class="l">card</th><th>GPUs</th>'
            "<th>step time ×</th><th>price ×</th><th>cost per work ×</th><th class=l>excluded</th></tr>"
        ]
        for c in cands:
            name, cloud, card, count = (
                escape(str(c.get(k) or "")) for k in ("instance", "cloud", "card", "gpus")
            )
            rows.append(
                f'<tr class="candidate" data-instance="{name}"><td class="l">{name}</td>'
                f'<td class="l">{cloud}</td><td class="l">{card}</td><td>{count}</td>'
                f"<td>{_range(c.get('step_ratio'))}</td><td>{_num(c.get('price_ratio'))}</td>"
                f"<td>{_range(c.get('cost_per_work_ratio'))}</td>"
                f'<td class="l">{escape(str(c.get("excluded") or ""))}</td></tr>'
            )
        out.append(f"<table>{''.join(rows)}</table>")
    assumptions = a.get("assumptions") or []
    if assumptions:
        out.append("<p class=note>assumptions: " + "; ".join(escape(str(x)) for x in assumptions) + "</p>")
    made = a.get("made_at")
    job = a.get("job")
    tail = (f"for job {escape(str(job))}, " if job else "") + (f"made {_iso(made)}" if made else "")
    if tail:
        out.append(f"<p class=note>{tail}</p>")
    out.append("</section>")
    return "".join(out)


def _range(v: Any) -> str:
    if isinstance(v, list | tuple) and len(v) == 2 and all(isinstance(x, int | float) for x in v):
        return f"{v[0]:.2f}-{v[1]:.2f}"
    return "?"


def _num(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, int | float) else "?"


def _rate(bps: float) -> str:
    for unit, size in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bps >= size:
            return f"{bps / size:.3g} {unit}"
    return f"{bps:.0f} B/s"


def _dl(rows: list[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in rows) + "</dl>"


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
