"""``load_state``: the one loader of the state files (classifier baselines, goodput ledger) and the
trainer's checkpoint reports: missing, unreadable, damaged."""

from __future__ import annotations

import json
from pathlib import Path

import structlog
from structlog.testing import capture_logs

from agent.core.statefile import load_state

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
