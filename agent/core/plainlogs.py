"""structlog without rich, whoever imports structlog first.

structlog.dev and structlog.tracebacks import rich (and pygments through it) for console tracebacks
whenever they can. The ``[top]`` extra installs rich, so without this every agent process, the daemon
first, would load some seventy more modules (about 3 MB of RSS) and print console tracebacks
differently depending on what else is installed. ``agent/__init__.py`` therefore puts
:class:`HideRichFromStructlog` first on ``sys.meta_path``: it refuses rich to structlog's own modules
when agent code is what imports them, and to nobody else. ``top`` imports rich itself and gets it; a
training script that imports structlog on its own keeps structlog's rich tracebacks. Whichever agent
module imports structlog first, ``import agent.runtime.daemon`` included, the daemon's imports and logs
are the same with or without the extra.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any


def _importers() -> Iterator[str]:
    """The modules on the stack, innermost first, the import machinery and this module left out."""
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name != __name__ and not name.startswith("importlib"):
            yield name
        frame = frame.f_back


def _structlog_for_agent() -> bool:
    importers = _importers()
    if not next(importers, "").startswith("structlog"):
        return False
    return any(name == "agent" or name.startswith("agent.") for name in importers)


class HideRichFromStructlog:
    """A meta path finder that finds nothing: it raises for rich when structlog asks for agent code."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> None:
        if fullname.partition(".")[0] == "rich" and _structlog_for_agent():
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def install() -> None:
    if not any(isinstance(f, HideRichFromStructlog) for f in sys.meta_path):
        sys.meta_path.insert(0, HideRichFromStructlog())
