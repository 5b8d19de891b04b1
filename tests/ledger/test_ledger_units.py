"""The ledger's pure parts with an injected clock: where each GPU state goes, periodic saves, work
lost at a reclaim, cadence advice, the damaged file, and restart continuity."""

from __future__ import annotations

import json
import math
import os
import random

import pytest
from ledger_synth import bucket, everything, ledger, run

from agent.ledger import store
from agent.ledger.assign import Bucket, Pressures
from agent.ledger.book import Book
from agent.ledger.cadence import advise, overhead
from agent.ledger.saved import Saved, collect, parse_saved

T0 = 1_700_000_000.0


def test_each_state_lands_in_its_bucket() -> None:
    led = ledger()
    t = run(led, T0, 10, ["working", "working"])  # a job present when the agent starts: no startup
    t = run(led, t, 10, ["spinning", "spinning"])
    t = run(led, t, 10, ["starved", "starved"], p=Pressures(storage=0.9))
    t = run(led, t, 10, ["starved", "starved"], p=Pressures(cpu=0.8))
    t = run(led, t, 10, ["starved", "starved"], p=Pressures(network=1.0))
    t = run(led, t, 10, ["spinning", "spinning"], p=Pressures(network_spin=1.0))
    t = run(led, t, 10, ["starved", "starved"])
    run(led, t, 10, ["starved", "starved"], job=False)
    got = everything(led)
    assert got[Bucket.PRODUCTIVE] == pytest.approx(20)
    assert got[Bucket.SYNC_WAIT] == pytest.approx(20)
    assert got[Bucket.DATA_STORAGE] == pytest.approx(18)  # 0.9 of the storage-pressed starvation
    assert got[Bucket.DATA_CPU] == pytest.approx(16)
    assert got[Bucket.NETWORK] == pytest.approx(20 + 20)
    assert got[Bucket.IDLE] == pytest.approx(2 + 4 + 20)
    assert got[Bucket.NO_JOB] == pytest.approx(20)
    assert sum(got.values()) == pytest.approx(160)


def test_a_gpu_without_its_own_process_is_no_job_and_startup_ends_at_first_work() -> None:
    led = ledger()
    t = run(led, T0, 5, ["starved", "starved"], job=False)
    # a job appears on GPU 0 only; it loads for 30 s, then works
    from ledger_synth import CFG, gpu

    from agent.classifier.published import unclassified
    from agent.ledger.assign import gpu_state

    def ticks(t: float, n: int, state: str) -> float:
        gpus = [gpu(0, state, busy=True), gpu(1, "starved", busy=False)]
        st = [gpu_state(g, unclassified(CFG)) for g in gpus]
        for _ in range(n):
            t += 1
            led.tick(t, 1.0, gpus, st, True, Pressures(), None)
        return t

    t = ticks(t, 30, "starved")
    ticks(t, 10, "working")
    got = everything(led)
    assert got[Bucket.STARTUP] == pytest.approx(30)
    assert got[Bucket.PRODUCTIVE] == pytest.approx(10)
    assert got[Bucket.NO_JOB] == pytest.approx(10 + 40)


def test_checkpoint_request_until_ack_is_checkpoint() -> None:
    led = ledger()
    t = run(led, T0, 20, ["working"] * 4)
    led.checkpoint("requested", "e1", t, False, None)
    t = run(led, t, 12, ["starved"] * 4)
    r = led.checkpoint("completed", "e1", t, False, 12.0)
    run(led, t, 5, ["working"] * 4)
    assert bucket(led, Bucket.CHECKPOINT) == pytest.approx(48)
    assert r is not None and r.outcome == "completed" and r.lost_gpu_seconds == 0
    assert led.last_durable == t and led.checkpoint_cost() == (12.0, "final checkpoints")
    # a final checkpoint is no cadence: the job has checkpointed never since it started
    assert led.interval(t + 5) == pytest.approx(t + 5 - T0, abs=1)


def test_an_open_request_ends_by_its_deadline_even_without_its_end() -> None:
    led = ledger()
    t = run(led, T0, 10, ["working"])
    led.checkpoint("requested", "lost-end", t, False, None, deadline=t + 30)
    run(led, t, 200, ["working"])
    assert bucket(led, Bucket.CHECKPOINT) == pytest.approx(30 + 60, abs=1)  # deadline, grace (a tick)
    assert not led.open_requests


def test_periodic_save_moves_waiting_time_to_checkpoint_never_productive_work() -> None:
    led = ledger(resolution=1.0)
    t = run(led, T0, 60, ["working"] * 2)
    t = run(led, t, 30, ["starved"] * 2)  # the save: the GPUs wait for it
    moved = led.saved(Saved(time=t, seconds=30.0, step=100, path="/ckpt/100", pid=7))
    assert moved == pytest.approx(60)
    assert bucket(led, Bucket.CHECKPOINT) == pytest.approx(60)
    assert bucket(led, Bucket.IDLE) == pytest.approx(0, abs=1e-9)
    assert bucket(led, Bucket.PRODUCTIVE) == pytest.approx(120)
    # an async save while the GPUs work takes nothing from productive work
    t = run(led, t, 60, ["working"] * 2)
    assert led.saved(Saved(time=t, seconds=20.0, step=200, path=None, pid=7)) == 0
    assert bucket(led, Bucket.PRODUCTIVE) == pytest.approx(240)


@pytest.mark.parametrize("acked", [False, True])
def test_reclaim_ten_minutes_after_the_last_periodic_checkpoint(acked: bool) -> None:
    """The acceptance scenario on an injected clock: 8 GPUs train, a periodic checkpoint is reported,
    10 minutes later a spot notice's final checkpoint misses (about 10 minutes lost) or is acked (none)."""
    led = ledger(resolution=10.0, settle=2 * 3600)
    t = run(led, T0, 1800, ["working"] * 8)
    led.saved(Saved(time=t, seconds=40.0, step=5000, path="/oss/ckpt-5000", pid=42))
    t = run(led, t, 600, ["working"] * 8)
    led.interruption()
    led.checkpoint("requested", "spot-1", t, False, None)
    t = run(led, t, 20, ["starved"] * 8)
    r = led.checkpoint("completed" if acked else "missed", "spot-1", t, False, 20.0 if acked else None)
    assert r is not None
    lost = bucket(led, Bucket.LOST)
    if acked:
        assert lost == 0 and r.lost_seconds == 0
    else:
        assert r.lost_seconds == pytest.approx(600, abs=10)  # within one slot
        assert lost == pytest.approx(600 * 8, abs=80)
        assert r.since_durable == pytest.approx(620)
    assert sum(everything(led).values()) == pytest.approx(8 * (1800 + 600 + 20))


@pytest.mark.parametrize("phase", ["no-target", "unreachable"])
@pytest.mark.parametrize("acked", [False, True])
def test_a_notice_whose_trainer_was_not_signalled_is_a_reclaim_all_the_same(phase: str, acked: bool) -> None:
    """No trainer found at the notice (it was not yet on the GPUs, a loaded box's first tick) or none
    safe to signal: only the request file was written. The GPUs' time stays productive meanwhile,
    and the notice's end books the reclaim: the work since the last checkpoint lost, or none where a
    trainer read the request file and acked (a daemon test found the loss never booked)."""
    led = ledger(resolution=10.0, settle=2 * 3600)
    t = run(led, T0, 1800, ["working"] * 2)
    led.saved(Saved(time=t, seconds=40.0, step=5000, path="/oss/ckpt-5000", pid=42))
    t = run(led, t, 600, ["working"] * 2)
    led.checkpoint(phase, "spot-1", t, False, None, deadline=t + 20)
    t = run(led, t, 20, ["working"] * 2)
    assert bucket(led, Bucket.CHECKPOINT) == 0  # nobody was asked to stop
    r = led.checkpoint("completed" if acked else "missed", "spot-1", t, False, 15.0 if acked else None)
    assert r is not None and list(led.reclaims) == [r]
    if acked:
        assert r.outcome == "completed" and r.lost_seconds == 0 and bucket(led, Bucket.LOST) == 0
    else:
        assert r.outcome == "missed" and r.lost_seconds == pytest.approx(620, abs=10)
        assert bucket(led, Bucket.LOST) == pytest.approx(2 * 620, abs=20)
    assert not led.unsignalled and not led.open_requests


def test_an_unsignalled_notice_survives_a_restart_and_expires_after_its_deadline(tmp_path) -> None:
    led = ledger(resolution=10.0, settle=60.0)
    t = run(led, T0, 60, ["working"])
    led.checkpoint("no-target", "spot-2", t, False, None, deadline=t + 30)
    store.save(tmp_path, led)
    again = store.load(tmp_path, Book(10.0, 60.0, 86400.0))
    assert again.unsignalled == {"spot-2": t + 30 + 60}
    run(again, t, 200, ["working"])  # past the deadline and its grace: the end never came
    assert not again.unsignalled
    assert again.checkpoint("missed", "spot-2", t + 200, False, None) is None


def test_a_drill_that_misses_moves_nothing_but_says_what_would_be_lost() -> None:
    led = ledger()
    t = run(led, T0, 300, ["working"] * 2)
    led.saved(Saved(time=t, seconds=None, step=1, path=None, pid=1))
    t = run(led, t, 600, ["working"] * 2)
    led.checkpoint("requested", "drill-x", t, True, None)
    r = led.checkpoint("missed", "drill-x", t + 1, True, None)
    assert r is not None and r.drill and r.lost_seconds == pytest.approx(600, abs=10)
    assert bucket(led, Bucket.LOST) == 0


def test_lost_work_older_than_settle_stays_where_it_was_counted() -> None:
    led = ledger(resolution=10.0, settle=300.0)
    t = run(led, T0, 1200, ["working"])
    r = led.checkpoint("requested", "s", t, False, None) or led.checkpoint("missed", "s", t, False, None)
    assert r is not None
    assert r.lost_gpu_seconds == pytest.approx(300, abs=10)
    assert r.stuck_gpu_seconds == pytest.approx(900, abs=10)
    assert led.book.unmovable == pytest.approx(r.stuck_gpu_seconds)


def test_young_daly() -> None:
    a = advise(60.0, "periodic saves", 86400.0, "config", 4 * 3600.0, 2.0)
    assert a is not None
    assert a.interval_seconds == pytest.approx(math.sqrt(2 * 60 * 86400))  # ~53.7 min
    assert a.overhead == pytest.approx(60 / a.interval_seconds + a.interval_seconds / (2 * 86400))
    assert a.sparse and a.current_overhead == pytest.approx(overhead(4 * 3600, 60, 86400))
    # the advised interval is the minimum of the overhead curve
    rng = random.Random(7)
    for _ in range(50):
        other = a.interval_seconds * rng.uniform(0.2, 5)
        assert overhead(other, 60, 86400) >= a.overhead - 1e-12
    assert advise(None, "", 86400.0, "config", None, 2.0) is None


def test_mtbi_from_node_history() -> None:
    led = ledger()
    run(led, T0, 7200, ["working"], step=60)
    assert led.mtbi(None) == (7200, "lower bound")
    led.interruption()
    led.interruption()
    assert led.mtbi(None) == (3600, "node history")
    assert led.mtbi(1800.0) == (1800.0, "config")


# --- periodic checkpoint reports: untrusted files ---------------------------------------------------


def _report(**over) -> bytes:
    d = {
        "kind": "saved",
        "step": 12,
        "path": "/ckpt/12",
        "seconds": 3.5,
        "time": "2025-03-14T06:11:00Z",
        "pid": 9,
    }
    d.update(over)
    return json.dumps(d).encode()


NOW = 1741932660.0 + 10  # just after 2025-03-14T06:11:00Z


def test_report_parsed() -> None:
    r = parse_saved(_report(), NOW)
    assert r == Saved(time=1741932660.0, seconds=3.5, step=12, path="/ckpt/12", pid=9)
    assert (
        parse_saved(_report(step=None, path=None, seconds=None, time="2025-03-14T14:11:00+08:00"), NOW).time
        == r.time
    )


@pytest.mark.parametrize(
    "bad, why",
    [
        (b"{", "not JSON"),
        (b"[1]", "not a JSON object"),
        (_report(kind="ack"), "kind"),
        (_report(time="2025-03-14 06:11"), "UTC offset"),
        (_report(time=1741932660), "RFC 3339"),
        (_report(time="2030-01-01T00:00:00Z"), "future"),
        (_report(seconds=-1), "out of range"),
        (_report(seconds="3"), "seconds"),
        (_report(seconds=float("nan")), "seconds"),
        (_report(step=True), "step"),
        (_report(step=-3), "step"),
        (_report(path=7), "path"),
        (_report(pid=0), "pid"),
        (_report(pid=None), "pid"),
    ],
)
def test_bad_report_refused_with_its_reason(bad: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_saved(bad, NOW)


def test_collect_deletes_good_reports_and_sets_bad_ones_aside(tmp_path) -> None:
    (tmp_path / "saved-9-1.json").write_bytes(_report())
    (tmp_path / "saved-9-2.json").write_bytes(b"garbage")
    (tmp_path / "saved-9-3.json").write_bytes(_report(step=13, time="2025-03-14T06:12:00Z"))
    (tmp_path / "saved-9-4.json").write_bytes(b"x" * 20000)
    os.symlink("/etc/hostname", tmp_path / "saved-9-5.json")
    (tmp_path / ".saved-9-6.json.tmp").write_bytes(_report())  # a writer's temp name: not yet
    (tmp_path / "request.json").write_text("{}")
    got = collect(tmp_path, NOW + 60, set())
    assert [r.step for r in got] == [12, 13]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [
        ".saved-9-6.json.tmp",
        "request.json",
        "saved-9-2.json.bad",
        "saved-9-4.json.bad",
        "saved-9-5.json.bad",
    ]
    assert os.path.islink(tmp_path / "saved-9-5.json.bad")  # moved, never followed
    assert collect(tmp_path, NOW + 60, set()) == []


# --- the file under state_dir --------------------------------------------------------------------


def test_restart_continues_the_counters_and_counts_nothing_twice(tmp_path) -> None:
    led = ledger(resolution=10.0, settle=60.0)
    t = run(led, T0, 300, ["working"] * 2)
    led.saved(Saved(time=t, seconds=None, step=1, path=None, pid=1))
    led.checkpoint("requested", "maint-1", t, False, None)  # a notice's checkpoint under way
    store.save(tmp_path, led)
    before = everything(led)
    settled_before = list(led.book.seconds)
    again = store.load(tmp_path, Book(10.0, 60.0, 86400.0))
    assert everything(again) == before
    assert again.open_requests == {"maint-1": t + 1800 + 60}
    assert again.book.seconds == settled_before and again.last_durable == t
    assert again.job and not again.startup  # the same job, not a new one starting up
    again.checkpoint("completed", "maint-1", t + 30, False, 30.0)
    run(again, t + 30, 100, ["working"] * 2)  # 30 s down: in no bucket
    after = everything(again)
    assert sum(after.values()) == pytest.approx(sum(before.values()) + 200)
    assert again.observed == pytest.approx(400)


def test_the_file_holds_the_ledger_while_slots_settle_expire_and_move(tmp_path) -> None:
    """A settled slot's text is kept from the save that first wrote it (it never changes again):
    through settling, expiry, late saves moving open slots and a restart, each file written still
    reads back as exactly the ledger."""
    rng = random.Random(14)
    states = ["working", "spinning", "starved", "between", "down"]
    led = ledger(resolution=10.0, settle=60.0, keep=300.0)
    t = T0

    def normal(d: dict) -> dict:
        return json.loads(json.dumps(d))

    for k in range(60):
        gpus = [rng.choice(states) for _ in range(3)]
        price = rng.choice([None, 0.002])
        t = run(led, t, rng.uniform(5, 40), gpus, step=rng.choice([1.0, 2.5]), price=price)
        if k % 4 == 0:
            led.saved(Saved(time=t - 3, seconds=rng.uniform(1, 8), step=k, path=None, pid=1))
        store.save(tmp_path, led)
        on_disk = json.loads((tmp_path / store.FILE_NAME).read_bytes())
        assert on_disk == normal({"version": store.VERSION, **led.to_json()})
        if k == 30:  # a restart: the slots' texts are made again from the file
            led = store.load(tmp_path, Book(10.0, 60.0, 300.0))
    assert led.book.settled > 10 and led.book.slots[0].start > T0 + 300  # settled and expired slots
    assert normal(store.load(tmp_path, Book(10.0, 60.0, 300.0)).to_json()) == normal(led.to_json())


@pytest.mark.parametrize(
    "damage",
    [
        b"{not json",
        b'{"version": 1}',
        b'{"version": 9}',
        json.dumps({"version": 1, "book": {"seconds": {"nope": 1}}}).encode(),
    ],
)
def test_damaged_ledger_is_set_aside(tmp_path, damage: bytes) -> None:
    (tmp_path / store.FILE_NAME).write_bytes(damage)
    led = store.load(tmp_path, Book(10.0, 60.0, 86400.0))
    assert sum(everything(led).values()) == 0
    assert (tmp_path / (store.FILE_NAME + ".bad")).read_bytes() == damage
    assert not (tmp_path / store.FILE_NAME).exists()
