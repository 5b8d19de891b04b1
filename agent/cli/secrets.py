"""Secrets as the service would see them, for commands run from a shell (``check-config``,
``test-alert``): the unit's ``LoadCredential=`` sources stand in for ``$CREDENTIALS_DIRECTORY``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import BaseModel

from agent.config.credentials import UnitCredentials, check_secrets, iter_secrets


def add_unit_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--unit",
        type=Path,
        default=None,
        metavar="FILE",
        help="outside the service, read relative secret files from this systemd unit's LoadCredential= "
        "sources (default: the installed training-node-agent.service)",
    )


def say_where(found: UnitCredentials | None, cfg: BaseModel) -> None:
    """One line on stderr, where the config has relative secret files: where they are read from."""
    relative = any(s.file and not s.file.startswith("/") for _, s in iter_secrets(cfg))
    if found is None or not relative:
        return  # inside the service: $CREDENTIALS_DIRECTORY as systemd made it
    print(f"secrets: outside the service, read as the unit gives them: {found.describe()}", file=sys.stderr)
    for problem in found.problems:
        print(f"secrets: {problem}", file=sys.stderr)


def report_secrets(cfg: BaseModel, strict: bool) -> bool:
    """Resolve every secret of ``cfg``; print each one's place, source and outcome (never the value)
    on stderr. Returns False when one cannot be read."""
    ok = True
    for at, source, problem in check_secrets(cfg):
        ok &= problem is None
        mark = "ok" if problem is None else ("ERROR" if strict else "WARNING")
        print(f"secret {at} ({source}): {mark}{'' if problem is None else ': ' + problem}", file=sys.stderr)
    return ok
