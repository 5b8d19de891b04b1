"""A command in a detached tmux session of a fixed size, read back with ``capture-pane``: how the tests
see what an operator's terminal shows. Each pane has a tmux server of its own (``-L``), ended by
:meth:`close`."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


class TmuxPane:
    def __init__(self, tmux: str, name: str, width: int, height: int, script: Path) -> None:
        self.tmux = tmux
        self.server = f"tna-{name}-{os.getpid()}"
        self.width, self.height = width, height
        self._run(
            "new-session",
            "-d",
            "-s",
            "main",
            "-x",
            str(width),
            "-y",
            str(height),
            f"sh {shlex.quote(str(script))}",
        )
        # keep the pane (and what it shows) when the command ends, and never resize it to a client
        self._run("set-option", "-t", "main", "remain-on-exit", "on")
        self._run("set-option", "-t", "main", "window-size", "manual")

    def _run(self, *args: str) -> str:
        done = subprocess.run(
            [self.tmux, "-L", self.server, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if done.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def capture(self, escapes: bool = False) -> str:
        """The visible screen, one line per row (with SGR escapes when ``escapes``)."""
        return self._run("capture-pane", "-p", "-t", "main", *(["-e"] if escapes else []))

    def keys(self, *keys: str) -> None:
        self._run("send-keys", "-t", "main", *keys)

    def wait_for(
        self, predicate: Callable[[str], object], timeout: float = 30.0, what: str = "screen"
    ) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.capture()
            if predicate(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(
            f"{self.width}x{self.height}: timed out waiting for {what}; the screen:\n{screen}"
        )

    def close(self) -> None:
        subprocess.run([self.tmux, "-L", self.server, "kill-server"], capture_output=True, timeout=10)
