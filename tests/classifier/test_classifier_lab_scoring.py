"""The lab's scoring, on hand-made evaluation histories (no root needed)."""

from __future__ import annotations

import pytest

from lab.draws import INPUT_HELD_OUT_SEEDS, draw
from lab.harness import from_draw
from lab.scoring import ROWS, TRUTH, phase_shares, render, score


def ev(at: float, verdict: str | None, held: str | None = None) -> dict:
    return {"at": at, "verdict": verdict, "vote": verdict, "held": held, "scores": {}}


def test_phase_shares_are_time_weighted() -> None:
    phases = [(0.0, "compute"), (1.0, "spin"), (1.5, "compute"), (2.0, "spin")]
    assert phase_shares(phases, 0.5, 2.5) == pytest.approx({"compute": 0.5, "spin": 0.5})
    assert phase_shares(phases, 2.2, 3.0) == pytest.approx({"spin": 1.0})


def test_confusion_detection_and_the_allowance() -> None:
    regimes = [(100.0, "compute"), (110.0, "storage")]
    phases = [(100.0, "compute"), (110.0, "starved")]
    evs = [ev(100.5, "idle", "warming up"), ev(101.5, None, "filling window")]
    evs += [ev(101.5 + k, "compute") for k in range(1, 9)]  # 102.5 .. 109.5
    evs += [ev(110.5, "compute"), ev(111.5, "compute"), ev(112.5, "data/storage")]  # detected at 3
    evs += [ev(113.5 + k, "data/storage") for k in range(5)] + [ev(118.6, "mixed")]
    r = score("x", evs, regimes, phases, start=99.0, end=119.0, window=1.0, warmup=1.0)
    start, change = r.changes
    assert (start.before, start.after, start.latency_evaluations) == ("idle", "compute", 2)
    # 110.5's window is half storage, half compute: the count starts at 111.5
    assert (change.after, change.latency_evaluations, change.latency_seconds) == ("data/storage", 2, 2.5)
    # scored: compute after the 3 evaluations of its allowance (101.5-103.5), so 104.5 on: 6;
    # storage after its allowance (110.5-112.5), so 113.5 on: 5 right, 1 mixed
    assert r.confusion[("compute", "compute")] == 6
    assert r.confusion[("data/storage", "data/storage")] == 5
    assert r.confusion[("data/storage", "mixed")] == 1
    assert r.accuracy == pytest.approx(11 / 12)
    assert r.held["warming up"] == 1
    text = render([r])
    assert "compute -> data/storage  2 evaluations, 2.50 s" in text
    assert "counting the detection allowance after each change too:" in text


def test_spin_windows_called_compute_are_caught() -> None:
    regimes = [(0.0, "network")]
    phases = [(0.0, "spin"), (5.0, "compute"), (5.2, "spin")]
    evs = [ev(1.0, "idle", "warming up")] + [ev(1.0 + k, "compute") for k in range(1, 8)]
    r = score("n", evs, regimes, phases, start=-1.0, end=9.0, window=1.0, warmup=1.0)
    # every window is mostly spin (the warming-up one too); seven of them were called compute
    assert r.spin_windows == 8 and len(r.spin_called_compute) == 7
    assert r.changes[0].latency_evaluations is None
    assert "NOT DETECTED" in render([r])


def test_a_change_not_named_in_time_carries_what_was_voted() -> None:
    regimes = [(0.0, "network")]
    evs = [ev(1.0, "idle", "warming up")]
    for k in range(1, 8):
        e = ev(1.0 + k, "sync-wait")
        e["scores"] = {"network": 0.3, "sync-wait": 0.7, "compute": 0.0}
        e["reasons"] = ["GPUs spinning 80% of the time", "network quiet meanwhile", "NIC carried 6.2 MB/s"]
        evs.append(e)
    r = score("n", evs, regimes, [(0.0, "spin")], start=-1.0, end=9.0, window=1.0, warmup=1.0)
    (change,) = r.changes
    assert change.latency_evaluations is None
    # one bracket per evaluation of the allowance and one past it, the reasons that carry numbers
    assert change.seen.count("[sync-wait/sync-wait netw=0.30,sync=0.70 ") == 4
    assert "80% of the time; NIC carried 6.2 MB/s]" in change.seen
    assert "quiet meanwhile" not in change.seen and "comp=" not in change.seen
    # a change named in time carries none
    evs[3]["verdict"] = "network"
    again = score("n", evs, regimes, [(0.0, "spin")], start=-1.0, end=9.0, window=1.0, warmup=1.0)
    assert again.changes[0].seen == ""


def test_an_idle_run_is_idle_throughout() -> None:
    evs = [ev(1.0 + k, "compute" if k < 2 else "idle") for k in range(8)]
    r = score("idle", evs, [], [], start=0.5, end=9.0, window=1.0, warmup=1.0, before="compute")
    assert r.changes[0].latency_evaluations == 2  # 1.0's window is half before the start: not counted
    assert r.confusion[("idle", "idle")] == 5 and r.accuracy == 1.0


def test_first_verdict_is_the_jobs_own_and_what_follows_it_is_counted() -> None:
    """A verdict carried through the warm-up from the job before (the same label) is not this job's
    first; the evaluations after the first right one are counted for how well it held."""
    regimes = [(100.0, "network-input")]
    phases = [(100.0, "starved"), (130.0, "idle")]
    evs = [ev(101.0 + 5 * k, "data/network-input", "warming up") for k in range(4)]  # 101 .. 116
    evs += [ev(121.0, "data/network-input"), ev(126.0, "network"), ev(129.0, "data/network-input")]
    r = score("s", evs, regimes, phases, start=99.0, end=130.0, window=60.0, warmup=20.0)
    assert r.first_verdict_seconds == 21.0
    assert r.after_first == (1, 2) and r.held_after_first == 0.5
    assert "held 1/2 (50%)" in render([r])
    # never named: nothing held
    none = score("s", evs[:4], regimes, phases, start=99.0, end=130.0, window=60.0, warmup=20.0)
    assert none.first_verdict_seconds is None and none.held_after_first is None
    assert "held -  (1 never)" in render([none])


def test_the_input_families_truth() -> None:
    assert TRUTH["network-input"] == "data/network-input" and "data/network-input" in ROWS
    sc = from_draw(draw(INPUT_HELD_OUT_SEEDS[1], 2))
    assert (sc.family, sc.schedule[0][0], TRUTH[sc.schedule[0][0]]) == ("cpu-inline", "cpu", "data/cpu")
    sc = from_draw(draw(INPUT_HELD_OUT_SEEDS[0], 2))
    assert (sc.family, sc.schedule[0][0], TRUTH[sc.schedule[0][0]]) == (
        "network-input",
        "network-input",
        "data/network-input",
    )


def test_a_shapes_own_bar_widens_the_allowance_and_only_to_it() -> None:
    """A save every 10-20 s must be named within 60 s of the job's start (issue 48), not within the
    3 evaluations after the warm-up: the evaluations up to then are not scored, those after are."""
    regimes = [(100.0, "checkpoint-stall")]
    phases = [(100.0, "compute"), (180.0, "idle")]
    evs = [ev(100.0 + 5 * k, "idle", "warming up") for k in range(1, 5)]  # 105 .. 120
    evs += [ev(120.0 + 5 * k, "compute") for k in range(1, 6)]  # 125 .. 145: not yet named
    evs += [ev(148.0, "host/checkpoint"), ev(153.0, "host/checkpoint"), ev(158.0, "host/checkpoint")]
    evs += [ev(163.0, "compute"), ev(168.0, "host/checkpoint")]  # 63 s on: scored, one wrong
    kw = dict(start=99.0, end=180.0, window=60.0, warmup=20.0)
    strict = score("s", evs, regimes, phases, **kw)
    wide = score("s", evs, regimes, phases, allowance_seconds=60.0, **kw)
    # three evaluations after the warm-up (125-135) are allowed; 140, 145 and 163 read compute
    assert strict.confusion[("host/checkpoint", "compute")] == 3
    assert strict.confusion[("host/checkpoint", "host/checkpoint")] == 4
    # up to 60 s from the job's start (160) are allowed: 163 is scored, and still wrong
    assert wide.confusion[("host/checkpoint", "compute")] == 1
    assert wide.confusion[("host/checkpoint", "host/checkpoint")] == 1
    # the change is detected as before: the first evaluation past half a window that names it
    assert wide.changes[0].latency_seconds == strict.changes[0].latency_seconds == 33.0


def test_a_change_named_within_its_shapes_bar_is_not_late() -> None:
    regimes = [(100.0, "checkpoint-stall")]
    evs = [ev(105.0 + 5 * k, "idle", "warming up") for k in range(4)]  # 105 .. 120
    evs += [ev(at, "compute") for at in (151.0, 152.0, 153.0)] + [ev(154.0, "host/checkpoint")]
    kw = dict(start=99.0, end=160.0, window=60.0, warmup=20.0)
    strict = score("s", evs, regimes, [(100.0, "starved")], **kw)
    wide = score("s", evs, regimes, [(100.0, "starved")], allowance_seconds=60.0, **kw)
    assert strict.changes[0].latency_evaluations == wide.changes[0].latency_evaluations == 4
    assert strict.changes[0].seen.startswith("[compute/compute")  # late by 3 evaluations
    assert wide.changes[0].seen == ""  # 54 s from the job's start: within its bar
    named_late = score("s", evs, regimes, [(100.0, "starved")], allowance_seconds=50.0, **kw)
    assert named_late.changes[0].seen != ""
