"""The ``training-node-agent`` command.

The built-in sub-commands are in :data:`COMMANDS`; the others live with their part of the agent and
register themselves there, with a function that adds their arguments and one that runs them, when
their module is imported. :data:`PLUGINS` says which module holds which, so that a command loads its
own module and nothing else: ``run`` (the service) imports none of them, neither the simulator nor
the demo nor ``report``'s tables (docs/architecture.md, "The daemon's memory").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from agent import __version__
from agent.config import DEFAULT_PATH, Config, ConfigError, load_config, redacted_dump
from agent.config.types import parse_duration

EXIT_CONFIG = 2


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", default=None, help=f"TOML config file (default {DEFAULT_PATH})")
    p.add_argument("--listen", help="override [http] listen, e.g. 127.0.0.1:9477")
    p.add_argument(
        "--state-dir",
        help="override [agent] state_dir; runtime files and the control socket go under it too",
    )
    p.add_argument("--control-socket", help="override [http] control_socket")


def resolve_config(args: argparse.Namespace) -> tuple[Config, str | None]:
    """The config file (default path only if it exists) with command-line overrides applied."""
    path = args.config
    if path is None and os.path.exists(DEFAULT_PATH):
        path = DEFAULT_PATH
    cfg = load_config(path)
    agent_upd: dict[str, Any] = {}
    http_upd: dict[str, Any] = {}
    if getattr(args, "state_dir", None):
        sd = os.path.abspath(args.state_dir)
        agent_upd = {"state_dir": sd, "runtime_dir": os.path.join(sd, "run")}
        http_upd["control_socket"] = os.path.join(sd, "run", "control.sock")
    if getattr(args, "listen", None):
        http_upd["listen"] = args.listen
    if getattr(args, "control_socket", None):
        http_upd["control_socket"] = args.control_socket
    if agent_upd or http_upd:
        data = cfg.model_dump(mode="json")
        data["agent"].update(agent_upd)
        data["http"].update(http_upd)
        from agent.config import parse_config

        cfg = parse_config(data, path or "<defaults>")
    return cfg, path


def control_socket_path(args: argparse.Namespace) -> str:
    try:
        cfg, _ = resolve_config(args)
        return cfg.http.control_socket
    except ConfigError:
        return Config().http.control_socket


# --- what the sub-commands share -------------------------------------------------------------------


def duration_arg(text: str) -> float:
    """An argparse ``type``: ``"90s"``, ``"1h"``, ``"7d"`` in seconds. Anything else is argparse's usage
    error (exit 2) naming what was given and what was expected."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_since(p: argparse.ArgumentParser, default: float | None, help_text: str) -> None:
    """``--since``: how far back the running agent's answer reaches, in seconds."""
    p.add_argument("--since", type=duration_arg, default=default, help=help_text)


def ask_agent(
    args: argparse.Namespace,
    path: str,
    what: str,
    *,
    expect: type = dict,
    timeout: float = 10,
    hint_404: str = "",
) -> Any | None:
    """GET ``path`` from the running agent over its control socket: the answer's body, or None once why
    not is on stderr (no agent there, or it answered an error or no ``expect``: "``what`` failed: …")."""
    from agent.runtime.control import control_request

    try:
        code, body = asyncio.run(control_request(control_socket_path(args), "GET", path, timeout=timeout))
    except ConnectionError as e:
        print(f"training-node-agent: {e}", file=sys.stderr)
        return None
    if code != 200 or not isinstance(body, expect):
        error = body.get("error", body) if isinstance(body, dict) else body
        hint = hint_404 if code == 404 else ""
        print(f"training-node-agent: {what} failed: {error}{hint}", file=sys.stderr)
        return None
    return body


# --- run -------------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    # frozenlist's C++ build (aiohttp's signal lists, made once at start-up) maps libstdc++: 1 MB of
    # the daemon's RSS for nothing a pure-Python list would not do (docs/architecture.md)
    os.environ.setdefault("FROZENLIST_NO_EXTENSIONS", "1")
    from agent.core.logsetup import setup_logging
    from agent.runtime.daemon import Daemon, StartupError

    cfg, path = resolve_config(args)
    setup_logging(cfg.agent.log_level, cfg.agent.log_format)

    async def main() -> int:
        daemon = Daemon(cfg, path)
        try:
            return await daemon.run()
        except StartupError as e:
            print(f"training-node-agent: {e}", file=sys.stderr)
            return 1

    code = asyncio.run(main())
    # A collector stuck in the kernel (hung NFS, wedged driver) holds its worker thread forever, and
    # the interpreter would wait for it at exit: leave without waiting once everything is flushed.
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


# --- check-config ----------------------------------------------------------------------------------


def cmd_check_config(args: argparse.Namespace) -> int:
    cfg, path = resolve_config(args)
    web = ""
    if cfg.http.web_config:
        from agent.exporter.server import WebConfigInvalid, load

        try:
            loaded = load(cfg.http.web_config)
        except WebConfigInvalid as e:
            print(f"[http] web_config: {e}", file=sys.stderr)
            return EXIT_CONFIG
        tls = loaded.config.tls_server_config
        users = len(loaded.config.basic_auth_users)
        mtls = f", client certificates {tls.client_auth_type}" if loaded.ssl and tls.verifies_clients else ""
        web = (
            f"; web config {cfg.http.web_config}: OK ({'https' if loaded.ssl else 'http'}{mtls}"
            f", {users} basic auth user{'s' if users != 1 else ''})"
        )
    print(f"# {path or 'built-in defaults'}: OK{web}")
    print(json.dumps(redacted_dump(cfg), indent=2))
    # every secret is read, as the service would read it: an unreadable one is reported (on stderr,
    # the JSON above stays parseable), and with --resolve-secrets it fails the check
    from agent.cli.secrets import report_secrets, say_where
    from agent.config.credentials import service_credentials

    with service_credentials(args.unit) as found:
        say_where(found, cfg)
        ok = report_secrets(cfg, strict=args.resolve_secrets)
    return 0 if ok or not args.resolve_secrets else EXIT_CONFIG


def _add_check_config(p: argparse.ArgumentParser) -> None:
    from agent.cli.secrets import add_unit_arg

    _add_config(p)
    p.add_argument(
        "--resolve-secrets",
        action="store_true",
        help="fail (exit 2) when a secret cannot be read; run it as root to read them as systemd does",
    )
    add_unit_arg(p)


# --- status ----------------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    from agent.cli.status_view import render_status
    from agent.runtime.control import control_request

    try:
        code, body = asyncio.run(control_request(control_socket_path(args), "GET", "/status", timeout=10))
    except ConnectionError as e:
        print(f"training-node-agent: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(body, indent=2, default=str))
    else:
        print(render_status(body))
    return 0 if code == 200 else 1


def cmd_reload(args: argparse.Namespace) -> int:
    from agent.runtime.control import control_request

    try:
        code, body = asyncio.run(control_request(control_socket_path(args), "POST", "/reload"))
    except ConnectionError as e:
        print(f"training-node-agent: {e}", file=sys.stderr)
        return 1
    print(body.get("message") if isinstance(body, dict) else body)
    return 0 if code == 200 else EXIT_CONFIG


def cmd_version(_: argparse.Namespace) -> int:
    print(f"training-node-agent {__version__}")
    return 0


# --- registry --------------------------------------------------------------------------------------

Adder = Callable[[argparse.ArgumentParser], None]
Runner = Callable[[argparse.Namespace], int]


def _add_status(p: argparse.ArgumentParser) -> None:
    _add_config(p)
    p.add_argument("--json", action="store_true", help="print the raw JSON")


COMMANDS: dict[str, tuple[str, Adder, Runner]] = {
    "run": ("run the daemon in the foreground", _add_config, cmd_run),
    "check-config": (
        "validate the config and print it resolved, secrets redacted; check every secret can be read",
        _add_check_config,
        cmd_check_config,
    ),
    "status": ("ask the running agent for its status", _add_status, cmd_status),
    "reload": ("ask the running agent to reload its config", _add_config, cmd_reload),
    "version": ("print the version", lambda p: None, cmd_version),
}


# the sub-commands that live with their part of the agent, by the module that registers them
PLUGINS: dict[str, str] = {
    "detect-cloud": "agent.cli.preemption",
    "metadata-sim": "agent.cli.preemption",
    "drill": "agent.cli.checkpoint",
    "ack": "agent.cli.checkpoint",
    "health-check": "agent.cli.health",
    "test-alert": "agent.cli.alerts",
    "report": "agent.cli.report",
    "advise": "agent.cli.advise",
    "hash-password": "agent.cli.webconfig",
    "top": "agent.cli.top",
    "demo": "agent.cli.demo",
}


def register(name: str, help_text: str, add: Adder, run: Runner) -> None:
    COMMANDS[name] = (help_text, add, run)


def _load_plugin(module: str) -> None:
    import importlib

    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:  # a module left out of the install (devtools) is no command; a bug is
            raise


def _command_in(argv: list[str]) -> str | None:
    """The sub-command named on the command line: the first word that is no option (the top-level
    options take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: every command with its help, and the arguments of the one named. A
    plugin's module is imported only when its command is the one named, or when none is and the help
    lists them all."""
    command = _command_in(sys.argv[1:] if argv is None else argv)
    if command not in COMMANDS:
        for module in [PLUGINS[command]] if command in PLUGINS else dict.fromkeys(PLUGINS.values()):
            _load_plugin(module)
    parser = argparse.ArgumentParser(
        prog="training-node-agent", description="Health agent for GPU training nodes."
    )
    parser.add_argument("--version", action="version", version=f"training-node-agent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, add, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:  # the others' arguments (and what adding them imports) are not needed
            add(p)
        p.set_defaults(func=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_CONFIG
    try:
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(e.render(), file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130
