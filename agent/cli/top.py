"""``training-node-agent top``: a full-screen live view of the running agent, read over the control
socket once a second.

The screen is drawn with rich (the optional ``[top]`` extra). Nothing here imports it at module level:
the CLI loads this module to register the command, and the daemon is that same CLI, so rich and the
screen modules load only once ``top`` itself runs. Keys come from the terminal in cbreak mode, read
by the event loop; the terminal's modes are put back however the view ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import termios
import time
from typing import TYPE_CHECKING, Any

from agent.cli.main import _add_config, control_socket_path, register, resolve_config
from agent.config import Config, ConfigError

if TYPE_CHECKING:
    from agent.cli.toppanels import History
    from agent.config.classifier import ClassifierSection


def extra_missing() -> str:
    """What to run to get rich, for the interpreter this CLI runs in (install.sh's venv, a user's):
    a bare ``pip`` could be another Python's."""
    import shlex

    sudo = "" if os.access(sys.prefix, os.W_OK) else "sudo "
    pip = f"{sudo}{shlex.quote(sys.executable)} -m pip install 'training-node-agent[top]'"
    return f"training-node-agent: top needs the optional [top] extra (rich); install it with: {pip}"


def _add_top(p: argparse.ArgumentParser) -> None:
    _add_config(p)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    p.add_argument("--once", action="store_true", help="print one frame and exit (what a pipe always gets)")


def _classifier_cfg(args: argparse.Namespace) -> ClassifierSection:
    """The thresholds the agent classifies with (same config file): a GPU row says SPIN exactly when
    the classifier counts that GPU as spinning."""
    try:
        return resolve_config(args)[0].classifier
    except ConfigError:
        return Config().classifier


async def _fetch(sock: str) -> dict[str, Any]:
    from agent.runtime.control import control_request

    code, body = await control_request(sock, "GET", "/status", timeout=5)
    if code != 200 or not isinstance(body, dict):
        raise ConnectionError(f"the agent answered {code} on {sock}: {str(body)[:200]}")
    return body


def cmd_top(args: argparse.Namespace) -> int:
    try:
        import rich  # noqa: F401
    except ModuleNotFoundError:
        print(extra_missing(), file=sys.stderr)
        return 1
    sock = control_socket_path(args)
    cfg = _classifier_cfg(args)
    try:
        first = asyncio.run(_fetch(sock))
    except ConnectionError as e:
        print(f"training-node-agent: {e}", file=sys.stderr)
        return 1
    if args.once or not sys.stdout.isatty():
        _print_frame(first, cfg)
        return 0
    return asyncio.run(_live(sock, cfg, first, max(0.2, args.interval)))


def _request_file(st: dict[str, Any]) -> bool | None:
    from agent.cli.topparts import section

    path = section(st, "checkpoint").get("request_file")
    return os.path.exists(path) if path else None


def _print_frame(st: dict[str, Any], cfg: ClassifierSection) -> None:
    from rich.console import Console

    from agent.cli.toppanels import History
    from agent.cli.topparts import View
    from agent.cli.topview import screen

    console = Console(highlight=False)
    hist = History()
    hist.record(st)
    view = View(width=console.size.width, height=None, request_file=_request_file(st))
    for line in screen(st, hist, cfg, view):
        console.print(line, soft_wrap=False, overflow="ellipsis", crop=True)


class _Keys:
    """Single key presses from the terminal while the view runs (cbreak: no echo, no line editing,
    Ctrl-C still interrupts); SIGWINCH wakes the loop too, so a resize redraws at once."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.fd = sys.stdin.fileno() if sys.stdin.isatty() else None
        self._saved: list[Any] | None = None

    def __enter__(self) -> _Keys:
        if self.fd is not None:
            import tty  # here: the daemon loads this module (the CLI registry) and never needs it

            self._saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
            self.loop.add_reader(self.fd, self._read)
        self.loop.add_signal_handler(signal.SIGWINCH, self.queue.put_nowait, "")
        return self

    def _read(self) -> None:
        assert self.fd is not None
        data = os.read(self.fd, 64)
        self.queue.put_nowait(data.decode(errors="ignore") if data else "q")  # EOF: nobody types any more

    def __exit__(self, *_: object) -> None:
        with contextlib.suppress(Exception):
            self.loop.remove_signal_handler(signal.SIGWINCH)
        if self.fd is not None:
            self.loop.remove_reader(self.fd)
            if self._saved is not None:
                termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)


async def _live(sock: str, cfg: ClassifierSection, first: dict[str, Any], interval: float) -> int:
    from rich.console import Console, Group
    from rich.live import Live

    from agent.cli.toppanels import History
    from agent.cli.topparts import View
    from agent.cli.topview import screen

    console = Console(highlight=False)
    hist: History = History()
    hist.record(first)
    st, error = first, None
    detail = helping = False
    next_fetch = time.monotonic() + interval
    with (
        _Keys(asyncio.get_running_loop()) as keys,
        Live(
            console=console, screen=True, auto_refresh=False, redirect_stdout=False, redirect_stderr=False
        ) as live,
    ):
        while True:
            if time.monotonic() >= next_fetch:
                try:
                    st, error = await _fetch(sock), None
                    hist.record(st)
                except ConnectionError as e:
                    error = f"agent unreachable, retrying: {e}"
                next_fetch = time.monotonic() + interval
            # the terminal's own size, not COLUMNS/LINES (which rich prefers): those are often stale
            # (readline exports them once, at 80x24 without a terminal), and this view follows resizes
            with contextlib.suppress(OSError):
                console.size = os.get_terminal_size(sys.stdout.fileno())
            size = console.size
            view = View(size.width, size.height, time.time(), detail, helping, error, _request_file(st))
            live.update(Group(*screen(st, hist, cfg, view)), refresh=True)
            try:
                pressed = await asyncio.wait_for(keys.queue.get(), max(0.05, next_fetch - time.monotonic()))
            except TimeoutError:
                continue
            for key in pressed:
                if key in "qQ":
                    return 0
                if helping:
                    helping = False
                elif key in "hH?":
                    helping = True
                elif key in "gG":
                    detail = not detail


register("top", "full-screen live view of the running agent (q quits, h helps)", _add_top, cmd_top)
