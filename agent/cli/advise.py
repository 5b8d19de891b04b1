"""``training-node-agent advise [--job ID] [--json]``: which instance to rent next time, from what the
job did on this node (the running agent's advice part: its lines, the candidates with their step and
cost ranges, and the assumptions they rest on)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any
from urllib.parse import urlencode

from agent.cli.main import _add_config, control_socket_path, register
from agent.config.types import parse_duration


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _add_advise(p: argparse.ArgumentParser) -> None:
    _add_config(p)
    p.add_argument("--job", default=None, help="a scheduler job id (default: the job with the most GPU time)")
    p.add_argument(
        "--since",
        type=_duration,
        default=None,
        help='only the last period, e.g. "1h" (default: the whole run)',
    )
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
    from agent.runtime.control import control_request

    query = {k: v for k, v in (("job", args.job), ("since", args.since and f"{args.since:g}")) if v}
    path = "/advice" + (f"?{urlencode(query)}" if query else "")
    try:
        code, body = asyncio.run(control_request(control_socket_path(args), "GET", path, timeout=10))
    except ConnectionError as e:
        print(f"training-node-agent: {e}", file=sys.stderr)
        return 1
    if code != 200 or not isinstance(body, dict):
        error = body.get("error", body) if isinstance(body, dict) else body
        hint = " ([advice] or [goodput] is off?)" if code == 404 else ""
        print(f"training-node-agent: advise failed: {error}{hint}", file=sys.stderr)
        return 1
    print(json.dumps(body, indent=2) if args.json else render(body))
    return 0


register("advise", "which instance to rent next time, from what the job really did", _add_advise, cmd_advise)
