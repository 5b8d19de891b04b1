"""Config values: durations, sizes, secrets from env and credential files, redacted dumps."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from enum import StrEnum
from pathlib import Path

import pytest
import tzdata
from conftest import REPO
from pydantic import ByteSize, TypeAdapter

from agent.config import Config, ConfigError, parse_config, redacted_dump
from agent.config.types import Secret, format_duration, parse_bytes, parse_duration
from agent.core.zones import ZoneError, zone


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


def test_the_byte_forms_agent_toml_shows_read_as_pydantic_reads_them():
    """Every size and rate in configs/agent.toml (its comments too) parses to the bytes pydantic's own
    ByteSize gives; ours differs where pydantic's is loose (it reads past the unit) or not a rate."""
    forms = set(re.findall(r'"(\d[\d.]*\s*[KMGT]i?B(?:/s)?)"', (REPO / "configs" / "agent.toml").read_text()))
    assert {"1.2GB", "800MiB", "25GB/s", "3.125GB/s", "5MB/s", "350MB/s"} <= forms
    theirs = TypeAdapter(ByteSize)
    assert {f: parse_bytes(f) for f in forms} == {f: float(theirs.validate_python(f)) for f in forms}
    assert theirs.validate_python("25GB/min") == 25e9  # pydantic takes a per-minute rate as per second
    for loose in ("25GB/min", "5MB/h", -1):
        with pytest.raises(ValueError):
            parse_bytes(loose)


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


# --- [alerts] timezone without a tz database ------------------------------------------------------

ZONE_PROBE = """
import importlib.util, json, zoneinfo
from agent.config import ConfigError, load_config, parse_config
from agent.ledger.component import next_digest
out = {"tzpath": list(zoneinfo.TZPATH), "tzdata": importlib.util.find_spec("tzdata") is not None,
       "zones": len(zoneinfo.available_timezones())}
out["default"] = load_config(None).alerts.timezone
out["shipped"] = load_config("configs/agent.toml").alerts.timezone
for name in ("UTC", "+08:00", "Asia/Shanghai"):
    try:
        parse_config({"alerts": {"timezone": name}})
        out[name] = next_digest(0.0, "09:00", name)  # the next 09:00 there after the epoch
    except ConfigError as e:
        out[name] = e.render()
print(json.dumps(out))
"""


def _zone_probe(tmp_path: Path, tzdata_package: bool) -> dict:
    """ZONE_PROBE with an empty PYTHONTZPATH, in this venv, or in a copy of its site-packages (links)
    without the tzdata package: a system without a tz database at all."""
    empty = tmp_path / "zoneinfo"
    empty.mkdir()
    cmd = [sys.executable, "-c", ZONE_PROBE]
    if not tzdata_package:
        site = Path(tzdata.__file__).parent.parent
        bare = tmp_path / "site-packages"
        bare.mkdir()
        for entry in site.iterdir():
            if not entry.name.startswith("tzdata"):
                (bare / entry.name).symlink_to(entry)
        # -S: no site-packages of the venv (and no .pth); the checkout and the links instead
        path = f"import sys; sys.path[1:1] = {[str(REPO), str(REPO / 'client'), str(bare)]!r}; "
        cmd = [sys.executable, "-S", "-c", path + ZONE_PROBE]
    env = {**os.environ, "PYTHONTZPATH": str(empty)}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_default_config_loads_without_any_tz_database(tmp_path):
    out = _zone_probe(tmp_path, tzdata_package=False)
    # the condition is real: zoneinfo finds no zone at all
    assert out["tzpath"] == [str(tmp_path / "zoneinfo")] and not out["tzdata"] and out["zones"] == 0
    assert out["default"] == out["shipped"] == "UTC"
    assert out["UTC"] == 9 * 3600.0 and out["+08:00"] == 1 * 3600.0
    named = out["Asia/Shanghai"]
    assert "alerts.timezone: time zone 'Asia/Shanghai' needs the IANA tz database" in named, named
    assert "apt-get install tzdata" in named and "pip install tzdata" in named, named


def test_the_tzdata_package_serves_named_zones(tmp_path):
    """The agent depends on tzdata: with no system database, zoneinfo falls back to it."""
    out = _zone_probe(tmp_path, tzdata_package=True)
    assert out["tzdata"] and out["zones"] > 300
    assert out["Asia/Shanghai"] == 1 * 3600.0  # 09:00 in Shanghai is 01:00 UTC


@pytest.mark.parametrize(
    ("name", "hours"),
    [("UTC", 0), ("Etc/UTC", 0), ("+08:00", 8), ("-0530", -5.5), ("UTC+8", 8), ("UTC-03:30", -3.5)],
)
def test_fixed_zones(name, hours):
    assert zone(name).utcoffset(None) == timedelta(hours=hours)


@pytest.mark.parametrize(
    ("name", "why"), [("+24:00", "at most 23:59"), ("Mars/Olympus", "unknown time zone")]
)
def test_bad_zones(name, why):
    with pytest.raises(ZoneError, match=why):
        zone(name)
    with pytest.raises(ConfigError, match=why):
        parse_config({"alerts": {"timezone": name}})


@pytest.mark.parametrize("name", ["auto", "none", "alibaba", "aws", "gcp", "azure", "tencent"])
def test_provider_takes_each_cloud_and_its_modes(name):
    cfg = parse_config({"preemption": {"provider": name}})
    assert cfg.preemption.provider == name and isinstance(cfg.preemption.provider, StrEnum)
    assert cfg.model_dump(mode="json")["preemption"]["provider"] == name


@pytest.mark.parametrize("bad", ["drill", "azur", "AWS", 3])
def test_provider_mistakes_name_every_choice(bad):
    with pytest.raises(ConfigError) as e:
        parse_config({"preemption": {"provider": bad}})
    (line,) = e.value.problems
    choices = "'auto', 'alibaba', 'aws', 'gcp', 'azure', 'tencent' or 'none'"
    assert line == f"preemption.provider: Input should be {choices} (got {bad!r})"


@pytest.mark.parametrize("name", ["auto", "spot", "on-demand"])
def test_market_takes_each_market_and_auto(name):
    cfg = parse_config({"cost": {"market": name}})
    assert cfg.cost.market == name and isinstance(cfg.cost.market, StrEnum)
    assert parse_config(cfg.model_dump(mode="json")) == cfg


def test_market_mistake_names_every_choice():
    with pytest.raises(ConfigError) as e:
        parse_config({"cost": {"market": "reserved"}})
    assert e.value.problems == ["cost.market: Input should be 'spot', 'on-demand' or 'auto' (got 'reserved')"]


def test_one_node_name_with_the_old_jobs_key_as_its_alias():
    """[scheduler] node_name names the node for the scheduler action and the jobs source alike; an
    old config's [jobs] node_name is still read where it is the only one, and two that differ are
    refused rather than one silently winning."""
    assert parse_config({"scheduler": {"node_name": "cn-17"}}).node_name == "cn-17"
    assert parse_config({"jobs": {"node_name": "cn-17"}}).node_name == "cn-17"
    same = {"jobs": {"node_name": "cn-17"}, "scheduler": {"node_name": "cn-17"}}
    assert parse_config(same).node_name == "cn-17"
    assert parse_config({}).node_name == ""
    with pytest.raises(
        ConfigError, match=r"\[jobs\] node_name 'cn-1' and \[scheduler\] node_name 'cn-17' differ"
    ):
        parse_config({"jobs": {"node_name": "cn-1"}, "scheduler": {"node_name": "cn-17"}})
