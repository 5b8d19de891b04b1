"""For the "auto with no DMI evidence sends nothing" test: the suite's network guard, plus a record of
every IP connect() the process makes, loopback included, in $TNA_CONNECT_LOG."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
from pathlib import Path

_guard = Path(__file__).resolve().parents[2] / "netguard" / "sitecustomize.py"
_spec = importlib.util.spec_from_file_location("tna_netguard", _guard)
assert _spec is not None and _spec.loader is not None
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))


def _record(event: str, args: tuple) -> None:
    if event == "socket.connect" and args[0].family in (socket.AF_INET, socket.AF_INET6):
        path = os.environ.get("TNA_CONNECT_LOG")
        if path:
            with open(path, "a") as f:
                f.write(f"{os.getpid()} {' '.join(sys.argv[:3])}: connect {args[1]!r}\n")


sys.addaudithook(_record)
