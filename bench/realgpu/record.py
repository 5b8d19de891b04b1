"""What every stage writes: JSON-safe values, a partial result kept on disk as it grows (so a stage
killed at its deadline still leaves what it saw), and a log line format."""

from __future__ import annotations

import ctypes
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


class Skip(Exception):
    """A stage (or a part of one) that cannot run here; the message is the reason."""


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON: ctypes structures become dicts, arrays lists, bytes text; pointers are left
    out (following one from a driver's structure is how a probe crashes)."""
    if depth > 40:  # no structure of NVML's nests this deep: something refers to itself
        return repr(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes):
        return value.rstrip(b"\x00").decode(errors="replace")
    if isinstance(value, ctypes.Array):
        return [plain(v, depth + 1) for v in value]
    if isinstance(value, ctypes.Structure | ctypes.Union):
        out = {}
        for spec in value._fields_:
            name, ctype = spec[0], spec[1]
            if issubclass(ctype, ctypes._Pointer | ctypes.c_char_p | ctypes.c_void_p):
                out[name] = "<pointer>"
            else:
                out[name] = plain(getattr(value, name), depth + 1)
        return out
    if isinstance(value, ctypes._SimpleCData):
        return plain(value.value, depth + 1)
    if isinstance(value, dict):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v, depth + 1) for v in value]
    return repr(value)


def failure(e: BaseException) -> dict[str, Any]:
    return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}


def write_json(path: Path, data: Any) -> None:
    """Replace ``path`` in one rename: a reader (or a kill) never leaves half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(plain(data), indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)


def log_line(stage: str, message: str) -> None:
    """One line on stderr, which the runner points at the run's log."""
    stamp = time.strftime("%H:%M:%S")
    print(f"{stamp} [{stage}] {message}", file=sys.stderr, flush=True)


class Partial:
    """A stage's result, rewritten to ``path`` whenever a part of it is put."""

    def __init__(self, path: Path, stage: str, until: float) -> None:
        self.path = path
        self.stage = stage
        self.until = until  # time.monotonic() by which the stage must have finished
        self.data: dict[str, Any] = {"status": "running", "result": {}}

    def left(self) -> float:
        return self.until - time.monotonic()

    def put(self, key: str, value: Any) -> Any:
        self.data["result"][key] = plain(value)
        write_json(self.path, self.data)
        return value

    def log(self, message: str) -> None:
        log_line(self.stage, message)

    def attempt(self, key: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` put under ``key``; an exception is put there instead (with its traceback) and the
        stage goes on: one broken measurement must not cost the others."""
        try:
            return self.put(key, fn())
        except Skip as e:
            self.put(key, {"skipped": str(e)})
        except Exception as e:
            self.log(f"{key} failed: {type(e).__name__}: {e}")
            self.put(key, failure(e))
        return None

    def finish(self, status: str, **fields: Any) -> None:
        self.data.update(status=status, **fields)
        write_json(self.path, self.data)
