"""``training-node-agent advise [--job ID] [--json]``: which instance to rent next time, from what the
job did on this node (the running agent's advice part: its lines, the candidates with their step and
cost ranges, and the assumptions they rest on)."""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import urlencode

from agent.cli.main import _add_config, add_since, ask_agent, register


def _add_advise(p: argparse.ArgumentParser) -> None:
    _add_config(p)
    p.add_argument("--job", default=None, help="a scheduler job id (default: the job with the most GPU time)")
    add_since(p, None, 'only the last period, e.g. "1h" (default: the whole run)')
    p.add_argument("--json", action="store_true", help="print the raw JSON")


def _span(v: list[float] | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v[0]:.{digits}f}–{v[1]:.{digits}f}×"


def render(a: dict[str, Any]) -> str:
    inst = a.get("instance")
    where = "not recognised"
    if inst:
        shape = f"{inst['gpus']}x {inst['card']}"
        where = (
            f"{inst['id']} (from {inst['source']})"
            if inst["id"] == shape
            else f"{inst['id']} ({shape}, from {inst['source']})"
        )
    out = [f"advice for {'job ' + a['job'] if a.get('job') else 'this node'} on {where}: {a['binds']} binds"]
    out += [f"  {line}" for line in a["lines"]]
    if a["candidates"]:
        out.append("")
        out.append(f"{'candidate':<28} {'card':<10} {'GPUs':>4} {'step':>13} {'price':>7} {'cost/work':>13}")
        for c in a["candidates"]:
            if c["excluded"]:
                out.append(f"{c['instance']:<28} {c['card']:<10} {c['gpus']:>4}  left out: {c['excluded']}")
                continue
            price = "-" if c["price_ratio"] is None else f"{c['price_ratio']:.2f}×"
            row = f"{c['instance']:<28} {c['card']:<10} {c['gpus']:>4} {_span(c['step_ratio']):>13}"
            out.append(f"{row} {price:>7} {_span(c['cost_per_work_ratio']):>13}")
    out.append("")
    out.append("resting on:")
    out += [f"  - {x}" for x in a["assumptions"]]
    return "\n".join(out)


def cmd_advise(args: argparse.Namespace) -> int:
    query = {k: v for k, v in (("job", args.job), ("since", args.since and f"{args.since:g}")) if v}
    path = "/advice" + (f"?{urlencode(query)}" if query else "")
    body = ask_agent(args, path, "advise", hint_404=" ([advice] or [goodput] is off?)")
    if body is None:
        return 1
    print(json.dumps(body, indent=2) if args.json else render(body))
    return 0


register("advise", "which instance to rent next time, from what the job really did", _add_advise, cmd_advise)
