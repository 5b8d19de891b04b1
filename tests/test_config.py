"""Config values: durations, sizes, secrets from env and credential files, redacted dumps."""

from __future__ import annotations

import pytest

from agent.config import Config, ConfigError, parse_config, redacted_dump
from agent.config.types import Secret, format_duration, parse_bytes, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("1s", 1.0), ("5m", 300.0), ("1.5h", 5400.0), ("2d", 172800.0), (" 10s ", 10.0)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", [5, 1.0, True, "5", "5 sec", "-1s", "1y", ""])
def test_bad_durations(bad):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


def test_duration_round_trip():
    for s in ("500ms", "1s", "5m", "2h", "1d", "90s"):
        assert format_duration(parse_duration(s)) == s


def test_sizes():
    assert parse_bytes("1.2GB") == 1.2e9
    assert parse_bytes("800MiB") == 800 * 1024**2
    assert parse_bytes("25GB/s") == 25e9
    assert parse_bytes(1000) == 1000.0
    with pytest.raises(ValueError):
        parse_bytes("fast")


def test_secret_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("TNA_TEST_SECRET", "from-env\n")
    assert Secret.model_validate("inline").resolve() == "inline"
    assert Secret.model_validate({"env": "TNA_TEST_SECRET"}).resolve() == "from-env"
    (tmp_path / "cred").write_text("from-file\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    assert Secret.model_validate({"file": "cred"}).resolve() == "from-file"
    assert Secret.model_validate({"file": str(tmp_path / "cred")}).resolve() == "from-file"
    with pytest.raises(ValueError, match="NOPE_NOT_SET"):
        Secret.model_validate({"env": "NOPE_NOT_SET"}).resolve()
    with pytest.raises(ValueError, match="cannot read secret file"):
        Secret.model_validate({"file": "missing"}).resolve()
    s = Secret.model_validate("hunter2-secret")
    assert "hunter2" not in repr(s) and "hunter2" not in str(s)
    with pytest.raises(ValueError):
        Secret.model_validate({"env": "A", "file": "b"})


def test_all_errors_at_once_with_key_paths():
    with pytest.raises(ConfigError) as e:
        parse_config(
            {"agent": {"interval": "fast", "stall_after": "0s", "typo": 1}, "http": {"listen": "x:99999"}},
            "test.toml",
        )
    problems = e.value.problems
    assert len(problems) == 4
    assert any(p.startswith("agent.interval:") for p in problems)
    assert any(p.startswith("agent.stall_after:") and "greater than 0" in p for p in problems)
    assert any(p == "agent.typo: unknown key" for p in problems)
    assert any(p.startswith("http.listen:") and "65535" in p for p in problems)
    assert "test.toml" in e.value.render()


def test_redacted_dump_shows_durations_as_written():
    dump = redacted_dump(Config())
    assert dump["agent"]["interval"] == "1s"
    assert dump["http"]["listen"] == "0.0.0.0:9477"
