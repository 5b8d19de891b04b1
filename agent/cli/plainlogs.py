"""structlog, imported with rich hidden from it.

structlog.dev takes rich (and, through rich.traceback, pygments) for console tracebacks whenever it
can import it. The ``[top]`` extra installs rich, so without this every agent process, the daemon
first, would load some seventy more modules and print console tracebacks differently depending on
what else is installed. The CLI is also the daemon's entry point and imports this module before
anything else, so the daemon's imports and logs are the same with or without the extra; ``top``
imports rich itself afterwards, which works because nothing is left behind in ``sys.modules``.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class _HideRich(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname.partition(".")[0] == "rich":
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


if "structlog" not in sys.modules and "rich" not in sys.modules:
    _finder = _HideRich()
    sys.meta_path.insert(0, _finder)
    try:
        import structlog  # noqa: F401
    finally:
        sys.meta_path.remove(_finder)
