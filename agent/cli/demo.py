"""``training-node-agent demo``: the guided tour (agent/devtools/demo.py), a command only where the
dev tools are installed. The command is the CLI's; the tour imports nothing of the CLI."""

from __future__ import annotations

import argparse
from importlib.util import find_spec

from agent.cli.main import register


def _add(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fast", action="store_true", help="shorter pauses (about 30 s; for tests)")
    p.add_argument("--gpus", type=int, default=4, choices=range(1, 9), metavar="1-8", help="fake GPUs (4)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, state)")
    p.add_argument("--no-color", action="store_true", help="plain text even on a terminal")
    p.add_argument(
        "--html", metavar="FILE", help="write the run's report page (report --html) to FILE at the end"
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from agent.devtools.demo import cmd_demo as tour

    return tour(args)


if find_spec("agent.devtools") is not None:
    register(
        "demo",
        "an input-bound job caught, then a spot reclaim rehearsed end to end: no root, GPU or cloud",
        _add,
        cmd_demo,
    )
