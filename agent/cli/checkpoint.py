"""``training-node-agent drill`` and ``training-node-agent ack``: clients of the control socket."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from agent.cli.main import _add_config, control_socket_path, duration_arg, register
from agent.core.vocabulary import DrillVerdict, NoticeKind

EXIT_WOULD_LOSE_WORK = 3


def _request(args: argparse.Namespace, path: str, payload: dict[str, Any], timeout: float) -> tuple[int, Any]:
    from agent.runtime.control import control_request

    return asyncio.run(control_request(control_socket_path(args), "POST", path, payload, timeout=timeout))


def _add_drill(p: argparse.ArgumentParser) -> None:
    _add_config(p)
    p.add_argument(
        "--kind",
        default=NoticeKind.SPOT_TERMINATION,
        help="notice kind to simulate (default spot-termination)",
    )
    p.add_argument(
        "--deadline",
        type=duration_arg,
        default=300.0,
        help='time from the notice to the deadline (default "300s")',
    )
    p.add_argument(
        "--timeout",
        type=duration_arg,
        default=None,
        help="stop waiting for the ack after this long (default: the deadline)",
    )
    p.add_argument("--dry-run", action="store_true", help="find and check the targets, send nothing")
    p.add_argument("--json", action="store_true", help="print the raw JSON report")


def cmd_drill(args: argparse.Namespace) -> int:
    from agent.checkpoint.report import render_report

    wait = args.timeout if args.timeout is not None else args.deadline
    payload = {
        "kind": args.kind,
        "deadline_seconds": args.deadline,
        "wait_seconds": wait,
        "dry_run": args.dry_run,
    }
    if not args.json:
        print(
            f"drill: synthetic {args.kind} notice, deadline in {args.deadline:g} s; waiting for the ack…",
            flush=True,
        )
    try:
        code, body = _request(args, "/checkpoint/drill", payload, timeout=wait + 15)
    except ConnectionError as e:
        print(f"training-node-agent: {e}", file=sys.stderr)
        return 1
    if code != 200 or not isinstance(body, dict) or "verdict" not in body:
        print(f"training-node-agent: drill failed: {_error(body)}", file=sys.stderr)
        return 1
    ledger = _goodput(args)
    scheduler = _scheduler_would(args, str(body.get("event_id", "")))
    if args.json:
        print(json.dumps({**body, "goodput": ledger, "scheduler": scheduler}, indent=2))
    else:
        print(render_report(body, color=sys.stdout.isatty()))
        if ledger:
            print("\n".join(drill_lines(ledger)))
        for line in scheduler:
            print(f"scheduler (dry run): {line}")
    return EXIT_WOULD_LOSE_WORK if body["verdict"] == DrillVerdict.WOULD_LOSE_WORK else 0


def _goodput(args: argparse.Namespace) -> dict[str, Any] | None:
    """The goodput ledger's view (what a reclaim now would lose, the cadence advice); None when the
    ledger is off."""
    from agent.runtime.control import control_request

    try:
        code, body = asyncio.run(control_request(control_socket_path(args), "GET", "/goodput", timeout=10))
    except ConnectionError:
        return None
    return body if code == 200 and isinstance(body, dict) else None


def _scheduler_would(args: argparse.Namespace, event_id: str) -> list[str]:
    """What the scheduler action would have done for the drill (it only says, never does)."""
    from urllib.parse import quote

    from agent.runtime.control import control_request

    path = f"/scheduler/would?event_id={quote(event_id)}&wait=5"
    try:
        code, body = asyncio.run(control_request(control_socket_path(args), "GET", path, timeout=10))
    except ConnectionError:
        return []
    lines = body.get("lines") if code == 200 and isinstance(body, dict) else None
    return [str(x) for x in lines] if isinstance(lines, list) else []


def drill_lines(g: dict[str, Any]) -> list[str]:
    from agent.ledger.cadence import human

    out = ["── goodput ──"]
    if g.get("job"):
        out.append(
            f"a reclaim now would lose {human(g.get('would_lose_seconds') or 0)} of work"
            + (
                f" (last durable checkpoint {g['last_durable']})"
                if g.get("last_durable")
                else " (no durable checkpoint reported)"
            )
        )
    out += g.get("cadence_lines") or []
    return out


def _add_ack(p: argparse.ArgumentParser) -> None:
    _add_config(p)
    p.add_argument("--event-id", help="the request's event_id (default: the open request)")
    p.add_argument("--step", type=int, help="the training step that was saved")
    p.add_argument("--path", help="where the checkpoint went")


def cmd_ack(args: argparse.Namespace) -> int:
    payload: dict[str, Any] = {}
    if args.event_id:
        payload["event_id"] = args.event_id
    if args.step is not None:
        payload["step"] = args.step
    if args.path:
        payload["path"] = args.path
    try:
        code, body = _request(args, "/checkpoint/ack", payload, timeout=15)
    except ConnectionError as e:
        print(f"training-node-agent: {e}", file=sys.stderr)
        return 1
    if code != 200 or not isinstance(body, dict):
        print(f"training-node-agent: ack refused: {_error(body)}", file=sys.stderr)
        return 1
    if body.get("ok"):
        print(
            f"acknowledged {body['event_id']}: checkpoint took {body['duration_seconds']:.2f} s, "
            "before the deadline"
        )
        return 0
    print(f"recorded for {body['event_id']}, but it is {body['phase']}", file=sys.stderr)
    return EXIT_WOULD_LOSE_WORK


def _error(body: Any) -> str:
    return str(body.get("error", body)) if isinstance(body, dict) else str(body)[:300]


register(
    "drill",
    "rehearse a spot notice end to end on the running agent and report whether the checkpoint is fast enough",
    _add_drill,
    cmd_drill,
)
register("ack", "tell the running agent that the requested checkpoint is durable", _add_ack, cmd_ack)
