"""``training-node-agent metadata-sim``: run the metadata simulator in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from agent.cli.main import register
from agent.config.types import parse_duration, split_listen
from agent.core.vocabulary import NoticeKind
from agent.preemption import registry


def _duration(text: str) -> float:
    """``30s``, ``5m`` or a plain number of seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _maintenance(text: str) -> tuple[str, float]:
    kind, _, seconds = text.partition(":")
    return kind, _duration(seconds) if seconds else 86400.0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--provider", required=True, choices=sorted(registry.names()), help="the cloud to imitate")
    p.add_argument(
        "--listen", default="127.0.0.1:8200", help="HOST:PORT (default 127.0.0.1:8200; port 0 = any)"
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --listen address (off: loopback only)",
    )
    p.add_argument("--notice-after", type=_duration, help="announce a notice this long after start, e.g. 30s")
    p.add_argument(
        "--notice-seconds",
        type=_duration,
        default=300.0,
        help="the notice's deadline after it appears (300s)",
    )
    p.add_argument(
        "--notice-kind",
        default=NoticeKind.SPOT_TERMINATION,
        help="spot-termination (default), spot-stop, ...",
    )
    p.add_argument(
        "--notice-moving",
        action="store_true",
        help="recompute the notice's time on every read: request time + --notice-seconds (what "
        "amazon-ec2-metadata-mock does by default)",
    )
    p.add_argument(
        "--maintenance",
        action="append",
        default=[],
        type=_maintenance,
        metavar="KIND[:AFTER_DEADLINE]",
        help="announce a maintenance event at start, e.g. reboot:24h (repeatable)",
    )
    p.add_argument(
        "--require-token", action="store_true", help="hardened mode / IMDSv2-only: tokenless reads fail"
    )
    p.add_argument("--verbose", "-v", action="store_true", help="print every metadata request")


def run(args: argparse.Namespace) -> int:
    from agent.devtools.simulator import is_loopback, start_simulator

    try:
        host, port = split_listen(args.listen)
    except ValueError:
        print(f"metadata-sim: --listen must be HOST:PORT, got {args.listen!r}", file=sys.stderr)
        return 2
    if not is_loopback(host) and not args.allow_remote:
        print(
            f"metadata-sim: refusing to listen on {host}: loopback only unless --allow-remote",
            file=sys.stderr,
        )
        return 2

    async def main() -> int:
        try:
            sim = await start_simulator(args.provider, host, port, require_token=args.require_token)
        except OSError as e:
            print(f"metadata-sim: cannot listen on {args.listen}: {e.strerror or e}", file=sys.stderr)
            return 1
        state = sim.state

        def said(what: str, ev: object) -> None:
            d = ev.as_dict()  # type: ignore[attr-defined]
            print(f"metadata-sim: {what} {d['kind']} {d['id']} deadline {d['deadline']}", flush=True)

        state.on_change = said
        try:
            for kind, seconds in args.maintenance:
                state.add_maintenance(kind, seconds)
            if args.notice_after is not None:
                state.add_notice(
                    args.notice_kind, args.notice_seconds, after=args.notice_after, moving=args.notice_moving
                )
        except ValueError as e:
            print(f"metadata-sim: {e}", file=sys.stderr)
            await sim.close()
            return 2
        if args.verbose:
            state.on_request = lambda e: print(
                f"metadata-sim: {e['method']} {e['path']}{'?' + e['query'] if e['query'] else ''}"
                f" -> {e['status']}{' (fault ' + e['fault'] + ')' if e['fault'] else ''}",
                flush=True,
            )
        mode = ", token required" if args.require_token else ""
        print(f"metadata-sim: {args.provider} metadata on {sim.url}{mode}", flush=True)
        print(f"metadata-sim: control API {sim.url}/_sim/state (docs/preemption.md)", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await sim.close()
        return 0

    return asyncio.run(main())


def add_detect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sysfs", default="/sys", help="sysfs root holding class/dmi/id (default /sys)")


def run_detect(args: argparse.Namespace) -> int:
    from agent.preemption.detect import classify
    from agent.preemption.dmi import DMI_FILES, read_dmi

    dmi = read_dmi(args.sysfs)
    found = classify(dmi)
    for name in DMI_FILES:
        print(f"{name:<18} {getattr(dmi, name) or '-'}")
    print(f"provider           {found.provider}  ({found.evidence})")
    return 0


register(
    "detect-cloud",
    'show what [preemption] provider = "auto" picks on this node, from DMI only (no network)',
    add_detect_args,
    run_detect,
)

register(
    "metadata-sim",
    "serve a cloud's metadata service locally (notices, maintenance, faults) for tests and rehearsals",
    add_args,
    run,
)
