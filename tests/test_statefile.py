"""``load_state``: the one loader of the state files (classifier baselines, goodput ledger, report
timeline) and the trainer's checkpoint reports: missing, unreadable, damaged; ``load_json`` and
``save_state``, what the agent's own JSON state goes through."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from agent.core.statefile import load_json, load_state, save_state

log = structlog.get_logger("test")


def _parse(raw: bytes) -> int:
    value = json.loads(raw)
    if not isinstance(value, int):
        raise ValueError("not a number")
    return value


def test_a_good_file_is_parsed(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text("7")
    with capture_logs() as logs:
        assert load_state(tmp_path / "s.json", _parse, log, damaged="damaged", unreadable="unreadable") == 7
    assert logs == []


def test_a_missing_file_is_none_and_says_nothing(tmp_path: Path) -> None:
    with capture_logs() as logs:
        assert (
            load_state(tmp_path / "s.json", _parse, log, damaged="damaged", unreadable="unreadable") is None
        )
    assert logs == []


def test_an_unreadable_file_is_left_where_it_is(tmp_path: Path) -> None:
    (tmp_path / "s.json").mkdir()  # reading a folder: IsADirectoryError
    with capture_logs() as logs:
        assert (
            load_state(tmp_path / "s.json", _parse, log, damaged="damaged", unreadable="unreadable") is None
        )
    assert [(e["event"], e["log_level"], e["path"]) for e in logs] == [
        ("unreadable", "warning", str(tmp_path / "s.json"))
    ]
    assert (tmp_path / "s.json").is_dir()


def test_a_damaged_file_is_set_aside_saying_where(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_bytes(b"\xff{")
    with capture_logs() as logs:
        assert (
            load_state(tmp_path / "s.json", _parse, log, damaged="damaged", unreadable="unreadable") is None
        )
    (entry,) = logs
    assert entry["event"] == "damaged" and entry["log_level"] == "warning"
    assert entry["kept_as"] == str(tmp_path / "s.json.bad") and entry["error"]
    assert (tmp_path / "s.json.bad").read_bytes() == b"\xff{"


def test_without_unreadable_a_file_that_cannot_be_read_is_damaged(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text("7")

    def refuse(path: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    with capture_logs() as logs:
        assert (
            load_state(
                tmp_path / "s.json", _parse, log, damaged="bad", read=refuse, level="error", key="file"
            )
            is None
        )
    assert [(e["event"], e["log_level"], e["file"], e["error"]) for e in logs] == [
        ("bad", "error", str(tmp_path / "s.json"), "Permission denied")
    ]
    assert (tmp_path / "s.json.bad").exists()


def _from_json(data: object) -> dict:
    if not isinstance(data, dict) or data.get("version") != 1:
        raise ValueError("not a version-1 state")
    return data


def test_save_state_is_the_agent_s_alone_and_reads_back(tmp_path: Path) -> None:
    save_state(tmp_path / "sub" / "s.json", '{"version": 1, "n": 2}')
    assert (tmp_path / "sub" / "s.json").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["s.json"]  # no temp file left
    with capture_logs() as logs:
        assert load_json(tmp_path / "sub" / "s.json", _from_json, log, what="w", instead="i") == {
            "version": 1,
            "n": 2,
        }
    assert logs == []


@pytest.mark.parametrize("content", [b"{not json", b'{"version": 9}', b"[]", b"\xff"])
def test_load_json_sets_a_damaged_file_aside_saying_what_and_where(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "s.json").write_bytes(content)
    (tmp_path / "other.json").write_text("{}")  # another part's state beside it
    with capture_logs() as logs:
        assert load_json(tmp_path / "s.json", _from_json, log, what="the thing", instead="going on") is None
    (entry,) = logs
    assert entry["event"] == "the thing damaged; set aside and going on"
    assert entry["log_level"] == "warning" and entry["error"]
    assert entry["path"] == str(tmp_path / "s.json") and entry["kept_as"] == str(tmp_path / "s.json.bad")
    # nothing lost: the damaged bytes kept whole, nothing else touched
    assert (tmp_path / "s.json.bad").read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.json", "s.json.bad"]
    assert (tmp_path / "other.json").read_text() == "{}"


def test_load_json_leaves_an_unreadable_file_where_it_is(tmp_path: Path) -> None:
    (tmp_path / "s.json").mkdir()
    with capture_logs() as logs:
        assert load_json(tmp_path / "s.json", _from_json, log, what="the thing", instead="going on") is None
    assert [e["event"] for e in logs] == ["cannot read the thing; going on"]
    assert (tmp_path / "s.json").is_dir()
