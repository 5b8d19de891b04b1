"""[alerts] and [[alerts.webhooks]]: defaults, clear errors, secrets that never show."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import REPO, write_toml

from agent.config import ConfigError, parse_config, redacted_dump

TOKEN = "8c1e4f8a0b5d4e2f9a7c6b5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f"


def hook(**kw) -> dict:
    return {
        "name": "ops",
        "type": "dingtalk",
        "url": f"https://oapi.dingtalk.com/robot/send?access_token={TOKEN}",
        **kw,
    }


def problems(alerts: dict) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config({"alerts": alerts})
    return "\n".join(e.value.problems)


def test_defaults_per_type() -> None:
    cfg = parse_config(
        {"alerts": {"webhooks": [hook(), hook(name="lark", type="feishu"), hook(name="s", type="slack")]}}
    )
    ding, lark, slack = cfg.alerts.webhooks
    assert ding.rates == ((20, 60.0),) and ding.effective_style == "markdown"
    assert lark.rates == ((5, 1.0), (100, 60.0)) and lark.effective_style == "card"
    assert slack.rates == ((1, 1.0),) and slack.effective_style == "blocks"
    assert cfg.alerts.language == "en" and cfg.alerts.repeat_interval == 4 * 3600
    assert set(ding.events) >= {"preemption", "verdict", "gpu_fault"} and ding.severities == [
        "critical",
        "warning",
        "info",
    ]


@pytest.mark.parametrize(
    ("alerts", "says"),
    [
        ({"webhooks": [hook(), hook()]}, "channel names must be unique: ops"),
        ({"webhooks": [hook(name="has space")]}, "webhooks[0].name: use letters"),
        ({"webhooks": [hook(type="teams")]}, "webhooks[0].type"),
        ({"webhooks": [hook(url="ftp://x")]}, "webhooks[0].url: must be an http:// or https:// URL"),
        ({"webhooks": [hook(rate_limits=["twenty a minute"])]}, 'expected a rate like "20/1m"'),
        ({"webhooks": [hook(style="blocks")]}, "style for dingtalk must be one of markdown, card, text"),
        ({"webhooks": [hook(style="card")]}, "a DingTalk actionCard needs a button target: set link"),
        ({"webhooks": [hook(events=["verdicts"])]}, "webhooks[0].events[0]"),
        ({"webhooks": [hook(secret={"env": "A", "file": "b"})]}, "give exactly one of"),
        ({"webhooks": [hook(tokn="x")]}, "webhooks[0].tokn: unknown key"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"language": "fr"}, "alerts.language"),
        ({"backoff_initial": "10s", "backoff_max": "1s"}, "backoff_max must be at least backoff_initial"),
    ],
)
def test_mistakes_get_one_clear_line(alerts: dict, says: str) -> None:
    assert says in problems(alerts)


def test_secrets_never_show_in_errors_or_the_dump() -> None:
    text = problems({"webhooks": [hook(url=f"ftp://{TOKEN}", secret="SECsigning-secret-123")]})
    assert TOKEN not in text
    cfg = parse_config({"alerts": {"webhooks": [hook(secret="SECsigning-secret-123")]}})
    dumped = json.dumps(redacted_dump(cfg))
    assert TOKEN not in dumped and "SECsigning-secret-123" not in dumped and "Secret(inline, ***)" in dumped
    # the config survives the JSON round trip the CLI's --state-dir override makes
    assert parse_config(cfg.model_dump(mode="json")) == cfg


def test_check_config_shows_the_section_redacted(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path / "agent.toml",
        {
            "alerts": {
                "language": "zh-CN",
                "webhooks": [hook(secret={"env": "DING_SECRET"}, rate_limits=["10/1m"])],
            }
        },
    )
    out = subprocess.run(
        [sys.executable, "-m", "agent", "check-config", "--config", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert (
        TOKEN not in out.stdout and "Secret(env=DING_SECRET, ***)" in out.stdout and '"10/1m"' in out.stdout
    )


def test_documented_section_parses_with_and_without_the_examples() -> None:
    shipped = (REPO / "configs" / "agent.toml").read_text()
    text = shipped[shipped.index("\n[alerts]") :]  # the last section of the shipped default
    assert parse_config(tomllib.loads(text)).alerts.webhooks == []  # the examples are commented out
    # "#key = ..." and "#[[...]]" lines are the commented-out examples
    cfg = parse_config(tomllib.loads(re.sub(r"(?m)^#(?=[\[a-z])", "", text)))
    kinds = {c.type for c in cfg.alerts.webhooks}
    assert kinds == {"dingtalk", "feishu", "wecom", "slack", "webhook"}
    assert any(c.url.env for c in cfg.alerts.webhooks) and any(
        c.secret and c.secret.file for c in cfg.alerts.webhooks
    )
