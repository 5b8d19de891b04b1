"""Who saw a checkpoint request, how and when: tna_client's note and ack say it, the agent's record
and report show it (agent/checkpoint/seen.py). A trainer started before its agent still leaves its
note once the agent's folder is there."""

from __future__ import annotations

import json
import os
import re
import signal
import time

from conftest import wait_until
from test_client_guard import _write_request
from tna_client import PreemptionGuard

from agent.checkpoint.publish import trainer_notes
from agent.checkpoint.request import clean_ack, read_ack
from agent.checkpoint.seen import clean_seen, seen_line


def test_a_trainer_started_before_its_agent_leaves_its_note_once_the_folder_appears(tmp_path):
    req = tmp_path / "run" / "checkpoint" / "request.json"  # the agent has not made it yet
    g = PreemptionGuard(signal=None, request_file=str(req), check_interval=0)
    note = req.parent / f"trainer-{os.getpid()}.json"
    assert not g.checkpoint_requested and not note.exists()
    req.parent.mkdir(parents=True)
    wait_until(lambda: (g.checkpoint_requested, note.exists())[1], timeout=5, what="the note, retried")
    assert [n["pid"] for n in trainer_notes(req.parent)] == [os.getpid()]
    g.uninstall()
    assert not note.exists()


def test_signal_first_the_note_and_the_ack_say_so(tmp_path):
    req = tmp_path / "cp" / "request.json"
    old = signal.getsignal(signal.SIGUSR2)
    g = PreemptionGuard(signal="USR2", request_file=str(req), rank=0, check_interval=10)
    try:
        # as the agent does it: the request file first, then the signal, which wakes the guard
        requested_at = time.time()
        _write_request(req, "ev-sig")
        os.kill(os.getpid(), signal.SIGUSR2)
        assert g.checkpoint_requested and g.event_id == "ev-sig"
    finally:
        g.uninstall()
        signal.signal(signal.SIGUSR2, old)
    assert g.seen is not None and g.seen["via"] == "SIGUSR2" and g.seen["at"] == g.signalled_at
    assert g.ack(step=7)
    ack = read_ack(req.parent / "ack-ev-sig.json", "ev-sig")
    assert ack is not None and ack["seen_via"] == "SIGUSR2" and ack["seen_at"] == g.signalled_at
    line = seen_line("ev-sig", requested_at, ack, [])
    assert line is not None
    assert re.fullmatch(
        rf"pid {os.getpid()} \(rank 0\) saw the request by SIGUSR2 at \d\d:\d\d:\d\dZ, 0\.\d s after it was"
        r" sent, and acked via file \d\.\d s after the request",
        line,
    ), line


def test_file_only_and_every_rank_in_its_note(tmp_path):
    req = tmp_path / "cp" / "request.json"
    g = PreemptionGuard(signal=None, request_file=str(req), rank=1, check_interval=0)
    requested_at = time.time()
    _write_request(req, "ev-file")
    assert g.checkpoint_requested and g.seen is not None and g.seen["via"] == "file"
    (note,) = trainer_notes(req.parent)
    assert note["seen"]["event_id"] == "ev-file" and note["seen"]["via"] == "file"
    line = seen_line("ev-file", requested_at, None, [note])
    assert line is not None and line.startswith(f"pid {os.getpid()} (rank 1) saw it in the request file at ")
    assert seen_line("another-event", requested_at, None, [note]) is None
    g.uninstall()


def test_the_line_pure():
    t0 = 1_800_000_000.0
    ack = clean_ack({"pid": 10, "rank": 0, "seen_via": "SIGUSR1", "seen_at": t0 + 0.2}, via="file")
    ack["at"] = t0 + 3.0
    notes = [
        {"pid": 10, "rank": 0, "seen": {"event_id": "e", "via": "SIGUSR1", "at": t0 + 0.2}},  # the acker
        {"pid": 11, "rank": 1, "seen": {"event_id": "e", "via": "file", "at": t0 + 0.6}},
        {"pid": 12, "rank": 2, "seen": {"event_id": "older", "via": "file", "at": t0 - 50}},
        {"pid": 13, "rank": 3},  # found the file, took nothing yet
    ]
    line = seen_line("e", t0, ack, notes)
    assert line == (
        "pid 10 (rank 0) saw the request by SIGUSR1 at 08:00:00Z, 0.2 s after it was sent, and acked via"
        " file 3.0 s after the request; pid 11 (rank 1) saw it in the request file at 08:00:00Z, 0.6 s"
        " after it was sent"
    )
    # an ack by an older client, or by hand: said as such, no "saw" invented
    bare = {"via": "control socket", "at": t0 + 1.0}
    assert seen_line("e", t0, bare, []) == (
        "a trainer acked via control socket 1.0 s after the request (when it saw the request it did not say)"
    )
    # a clock that is not ours gives no timing rather than a negative one
    skewed = seen_line(
        "e", t0, None, [{"pid": 11, "rank": None, "seen": {"event_id": "e", "via": "file", "at": t0 - 99}}]
    )
    assert skewed is not None and "after it was sent" not in skewed and skewed.startswith("pid 11 saw it")
    assert seen_line("e", t0, None, notes[2:]) is None
    assert clean_seen("SIGUSR1", True) is None and clean_seen("", 1.0) is None and clean_seen(3, 1.0) is None
    assert clean_ack({"seen_via": "x" * 500, "seen_at": "soon"}, via="file").keys() == {"via", "at"}
    assert len(clean_seen("x" * 500, 1.0)["via"]) == 40  # type: ignore[index]
    json.dumps(ack)  # the record is JSON
