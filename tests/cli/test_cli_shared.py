"""What the control-socket sub-commands share (agent/cli/main.py): ``--since`` parsed one way for
``report`` and ``advise``, and one call to the running agent that says on stderr why it got nothing."""

from __future__ import annotations

import argparse
import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from agent.cli.main import add_since, ask_agent


def _parser(default: float | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t")
    add_since(p, default, "the period")
    return p


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("1h", 3600.0), ("90m", 5400.0), ("7d", 604800.0), ("500ms", 0.5), ("1.5h", 5400.0)],
)
def test_since_takes_a_duration_in_seconds(given: str, seconds: float) -> None:
    assert _parser(None).parse_args(["--since", given]).since == seconds


def test_since_left_out_is_the_command_s_default() -> None:
    assert _parser(86400.0).parse_args([]).since == 86400.0
    assert _parser(None).parse_args([]).since is None


@pytest.mark.parametrize("given", ["soon", "10", "1 fortnight", "-1h", ""])
def test_since_refuses_what_is_no_duration_with_a_usage_error(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        _parser(None).parse_args([f"--since={given}"])  # with "=", "-1h" is no option
    assert e.value.code == 2
    err = capsys.readouterr().err
    # names the option, what was given and what a duration looks like
    assert "argument --since: expected a duration like" in err and f"got {given!r}" in err, err


@pytest.fixture
def agent_socket(tmp_path: Path) -> Iterator[str]:
    """A stand-in agent on a unix socket: /advice is off (404 with the agent's error), /page answers
    HTML, /goodput answers JSON."""

    async def advice(_: web.Request) -> web.Response:
        return web.json_response({"error": "the advice part is off"}, status=404)

    async def page(_: web.Request) -> web.Response:
        return web.Response(text="<!doctype html>", content_type="text/html")

    async def goodput(request: web.Request) -> web.Response:
        return web.json_response({"since": request.query.get("since")})

    app = web.Application()
    app.router.add_get("/advice", advice)
    app.router.add_get("/page", page)
    app.router.add_get("/goodput", goodput)
    path = str(tmp_path / "control.sock")
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.UnixSite(runner, path).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def _args(socket_path: str) -> argparse.Namespace:
    return argparse.Namespace(config=None, state_dir=None, listen=None, control_socket=socket_path)


def test_ask_agent_returns_the_body_it_expects(agent_socket: str) -> None:
    assert ask_agent(_args(agent_socket), "/goodput?since=3600", "report") == {"since": "3600"}
    assert ask_agent(_args(agent_socket), "/page", "report", expect=str) == "<!doctype html>"


def test_ask_agent_says_the_agent_s_error_and_the_hint(
    agent_socket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ask_agent(_args(agent_socket), "/advice", "advise", hint_404=" (is it on?)") is None
    err = capsys.readouterr().err
    assert err == "training-node-agent: advise failed: the advice part is off (is it on?)\n"
    # JSON where a page was expected is no page
    assert ask_agent(_args(agent_socket), "/goodput", "report", expect=str) is None
    assert "report failed" in capsys.readouterr().err


def test_ask_agent_without_an_agent_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ask_agent(_args(str(tmp_path / "none.sock")), "/goodput", "report") is None
    err = capsys.readouterr().err
    assert "no agent control socket at" in err and "none.sock" in err, err
