"""``training-node-agent test-alert [--channel NAME]``: send a test message through the configured
channels now, print each service's exact answer, exit 1 when any channel failed (2: config problem).

It talks to the services directly, not through a running agent, so it also works before the agent
is started; the message names the channel and this node.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from datetime import UTC, datetime

import aiohttp

from agent.alerts.connect import build_channel
from agent.alerts.message import NodeIdentity
from agent.alerts.render import build_test_alert
from agent.alerts.scene import Scene
from agent.alerts.services.base import Outcome, post
from agent.cli.main import EXIT_CONFIG, _add_config, register, resolve_config
from agent.cli.secrets import add_unit_arg, say_where
from agent.config.alerts import AlertsSection, WebhookChannel, channel_language
from agent.config.credentials import service_credentials
from agent.core.logsetup import redact_text
from agent.core.zones import zone


def _add_args(p: argparse.ArgumentParser) -> None:
    _add_config(p)
    p.add_argument("--channel", metavar="NAME", help="only this [[alerts.webhooks]] channel (default: all)")
    add_unit_arg(p)


async def _send_all(section: AlertsSection, channels: list[WebhookChannel]) -> bool:
    scene = Scene(NodeIdentity(socket.gethostname()), (), zone(section.timezone), datetime.now(UTC))
    all_ok = True
    async with aiohttp.ClientSession(headers={"User-Agent": "training-node-agent"}) as session:
        for cfg in channels:
            head = f"{cfg.name} ({cfg.type})"
            try:
                channel = build_channel(cfg)
            except ValueError as e:
                print(f"{head}: cannot use this channel: {e}")
                all_ok = False
                continue
            head += f" -> {channel.redacted_url()}"
            msg = build_test_alert(scene, channel_language(section, cfg), cfg.name)
            answer = await post(session, channel.build(msg), cfg.timeout)
            if isinstance(answer, Outcome):
                print(f"{head}: no answer: {answer.detail}")
                all_ok = False
                continue
            outcome = channel.judge(answer)
            print(f"{head}: HTTP {answer.status}")
            print(redact_text(answer.body))
            print(f"  => {outcome.describe()}")
            all_ok &= outcome.ok
    return all_ok


def cmd_test_alert(args: argparse.Namespace) -> int:
    cfg, path = resolve_config(args)
    channels = cfg.alerts.webhooks
    if not channels:
        print(
            f"training-node-agent: no [[alerts.webhooks]] in {path or 'the built-in defaults'}",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    if args.channel:
        channels = [c for c in channels if c.name == args.channel]
        if not channels:
            known = ", ".join(c.name for c in cfg.alerts.webhooks)
            print(
                f"training-node-agent: no channel named {args.channel!r} (configured: {known})",
                file=sys.stderr,
            )
            return EXIT_CONFIG
    # from a shell, the secrets the unit's LoadCredential= hands the service are read where they lie
    with service_credentials(args.unit) as found:
        say_where(found, cfg)
        return 0 if asyncio.run(_send_all(cfg.alerts, channels)) else 1


register("test-alert", "send a test alert through the configured chat channels", _add_args, cmd_test_alert)
