"""``training-node-agent report [--since 24h] [--by job]``: the goodput ledger of the running agent as
a table, a bar per bucket, the money per bucket, goodput, the top remedy and the cadence advice;
with ``--by job``, the GPU-hours, buckets and money of each scheduler job (``no job`` for the rest).

``report --html FILE [--job ID]``: the same as one self-contained HTML page (docs/report.md): the run's
timeline, the money per bucket, the GPUs, the inputs and links, for the node or one job."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agent.cli.main import _add_config, add_since, ask_agent, register
from agent.core.vocabulary import CheckpointPhase


def _add_report(p: argparse.ArgumentParser) -> None:
    _add_config(p)
    add_since(p, 86400.0, 'the period, e.g. "1h", "7d" (default "24h")')
    p.add_argument(
        "--by", choices=["job"], default=None, help="also split the GPU-hours and money by scheduler job"
    )
    p.add_argument("--json", action="store_true", help="print the raw JSON")
    p.add_argument("--html", metavar="FILE", help="write the report page (self-contained HTML) to FILE")
    p.add_argument("--job", metavar="ID", help="with --html: the page of this scheduler job only")


def render(g: dict[str, Any], by: str | None = None) -> str:
    from agent.ledger.cadence import human
    from agent.ledger.jobs import lines as job_lines
    from agent.ledger.summary import table

    out = [f"goodput ledger: the last {human(g['window_seconds'])} (since {g['since']}), {g['gpus']} GPU(s)"]
    out += table(g)
    ratio = g["ratio"]
    out.append("")
    out.append(f"goodput: {ratio:.1%}" if ratio is not None else "goodput: nothing booked in this period")
    money = g.get("cost")
    if money:
        line = f"spent {money['total']:.2f} {money['currency']}, wasted {money['wasted']:.2f}"
        market = money.get("market")
        if market:
            line += f" ({market}, {money.get('instance_hour_price') or '?'} per instance-hour"
            line += f", {money['instance_type']})" if money.get("instance_type") else ")"
        if money.get("spot_saving"):
            line += f"; spot saved {money['spot_saving']:.2f} against on-demand"
        out.append(line)
    else:
        out.append("cost: no price configured ([cost] instance_hour_price or [cost.prices])")
    if g.get("top_waste"):
        out.append(f"top remedy ({g['top_waste']}): {g['remedy']}")
    out += g.get("cadence_lines") or []
    for r in g.get("reclaims") or []:
        what = "drill" if r["drill"] else "reclaim"
        if r["outcome"] == CheckpointPhase.COMPLETED:
            out.append(f"{what} {r['event_id']}: final checkpoint acknowledged, nothing lost")
        else:
            verb = "would lose" if r["drill"] else "lost"
            out.append(
                f"{what} {r['event_id']}: final checkpoint missed, {verb} {human(r['lost_seconds'])} of work"
            )
            for job, lost in (r.get("jobs") or {}).items():
                if lost > 0:
                    out.append(f"  job {job}: {verb} {lost / 3600:.3f} GPU-h")
    if by == "job":
        out.append("")
        out += job_lines(g.get("jobs") or [])
    return "\n".join(out)


def cmd_report(args: argparse.Namespace) -> int:
    if args.html:
        return _html(args)
    if args.job:
        print(
            "training-node-agent: --job goes with --html (the table splits by job with --by job)",
            file=sys.stderr,
        )
        return 2
    body = ask_agent(args, f"/goodput?since={args.since:g}", "report")
    if body is None:
        return 1
    print(json.dumps(body, indent=2) if args.json else render(body, args.by))
    return 0


def _html(args: argparse.Namespace) -> int:
    from urllib.parse import urlencode

    from agent.core.statefile import write_atomic

    query = {"since": f"{args.since:g}", **({"job": args.job} if args.job else {})}
    body = ask_agent(args, f"/report?{urlencode(query)}", "report", expect=str, timeout=30)
    if body is None:
        return 1
    try:
        write_atomic(args.html, body.encode(), 0o644)
    except OSError as e:
        print(f"training-node-agent: cannot write {args.html}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"wrote {args.html} ({len(body.encode()) / 1e3:.0f} kB)")
    return 0


register(
    "report", "print the goodput ledger: where the GPU-seconds and the money went", _add_report, cmd_report
)
