"""``training-node-agent health-check``: is this node fit for jobs? For Slurm's HealthCheckProgram
and NHC. Exit 0 when the running agent says healthy; otherwise one line and a non-zero exit. It
never hangs: an agent that does not answer in ``TIMEOUT`` seconds is a failure, said as such."""

from __future__ import annotations

import argparse
import asyncio
import sys

from agent.cli.main import _add_config, control_socket_path, register

TIMEOUT = 5.0
EXIT_UNHEALTHY = 1
EXIT_NO_ANSWER = 2


def cmd_health_check(args: argparse.Namespace) -> int:
    from agent.runtime.control import control_request

    path = control_socket_path(args)

    async def ask() -> tuple[int, object]:
        async with asyncio.timeout(TIMEOUT):
            return await control_request(path, "GET", "/health", timeout=TIMEOUT)

    try:
        code, body = asyncio.run(ask())
    except TimeoutError:
        print(f"unhealthy: the agent did not answer on {path} within {TIMEOUT:g}s", file=sys.stderr)
        return EXIT_NO_ANSWER
    except ConnectionError as e:
        print(f"unhealthy: {e}", file=sys.stderr)
        return EXIT_NO_ANSWER
    if code == 200 and isinstance(body, dict) and body.get("healthy") is True:
        return 0
    why = body.get("why") if isinstance(body, dict) else None
    print(f"unhealthy: {why or f'the agent answered {code}: {str(body)[:200]}'}", file=sys.stderr)
    return EXIT_UNHEALTHY


register(
    "health-check",
    "exit 0 when the running agent finds this node fit for jobs (for Slurm's HealthCheckProgram)",
    _add_config,
    cmd_health_check,
)
