"""Secrets never reach a log line: registered values, secret-looking keys and tokens in URLs."""

from __future__ import annotations

import io
import json

import structlog

from agent.core.logsetup import register_secret, setup_logging


def _capture() -> io.StringIO:
    buf = io.StringIO()
    setup_logging("debug", "json", stream=buf)
    return buf


def test_registered_secret_is_redacted_everywhere():
    buf = _capture()
    register_secret("SEC-abcdef123456")
    log = structlog.get_logger("t")
    log.info("sending", note="signing with SEC-abcdef123456 now", nested={"x": ["SEC-abcdef123456"]})
    try:
        raise RuntimeError("bad key SEC-abcdef123456")
    except RuntimeError:
        log.exception("failed")
    out = buf.getvalue()
    assert "SEC-abcdef123456" not in out
    assert out.count("***") >= 3
    assert json.loads(out.splitlines()[0])["event"] == "sending"


def test_url_tokens_and_secret_keys_are_masked():
    buf = _capture()
    log = structlog.get_logger("t")
    log.warning(
        "post failed",
        url="https://oapi.dingtalk.com/robot/send?access_token=abc123def456&timestamp=1&sign=zzz999",
        slack="https://hooks.slack.com/services/T000/B000/XXXXSECRET",
        secret="plainsecret",
        token="tok-1",
    )
    line = json.loads(buf.getvalue())
    assert "abc123def456" not in buf.getvalue() and "zzz999" not in buf.getvalue()
    assert "XXXXSECRET" not in buf.getvalue()
    assert line["secret"] == "***" and line["token"] == "***"
    assert "timestamp=1" in line["url"]  # not a secret: kept for debugging


def test_console_format_also_redacts():
    buf = _capture()
    setup_logging("info", "console", stream=buf)
    register_secret("console-secret-xyz")
    structlog.get_logger("t").info("x", v="console-secret-xyz")
    assert "console-secret-xyz" not in buf.getvalue()
