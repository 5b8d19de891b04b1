"""Time in the classifier: hysteresis, warm-up, checkpoint holds, the spin-wait veto and the
sustained-verdict events."""

from __future__ import annotations

import pytest
from classifier_synth import COMPUTE, CPU, IDLE, NETWORK, STORAGE, SYNC, Regime, Run, fast_cfg, like, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.classifier.engine import Engine


def first_index(labels: list, value: str) -> int:
    return labels.index(value)


def test_a_new_verdict_needs_k_consecutive_wins() -> None:
    for k in (1, 3, 5):
        r = run(like(COMPUTE, seconds=20), like(STORAGE, seconds=40), cfg=fast_cfg(confirmations=k))
        labels = r.verdicts()
        votes = [e.vote.label for e in r.evaluations]
        switch = first_index(labels, "data/storage")
        # the K evaluations up to the switch all voted for it, and the one before them did not
        assert votes[switch - k + 1 : switch + 1] == ["data/storage"] * k
        assert votes[switch - k] != "data/storage"


def test_a_short_blip_does_not_flip_the_verdict() -> None:
    """Two seconds of starvation inside a compute run, a fifth of the window: seen, never the verdict.
    (Six seconds of a 10 s window are a cause worth naming: one cause holding cause_floor of the time
    is the verdict, work or not.)"""
    r = run(
        like(COMPUTE, seconds=20),
        like(STORAGE, phases=("starved",), seconds=2),
        like(COMPUTE, seconds=20),
        cfg=fast_cfg(confirmations=3),
    )
    assert max(e.vote.scores["data"] for e in r.evaluations) >= 0.15  # the blip was seen ...
    labels = r.verdicts()
    assert set(labels[labels.index("compute") :]) == {"compute"}  # ... but never became the verdict
    assert r.engine.changes_total == 0


def test_exit_threshold_sits_inside_entry() -> None:
    """Compute falls to 0.4: below enter_score (0.5), above exit_score (0.35), nobody leads by the
    margin -> it holds. A fresh engine seeing the same windows calls them mixed."""
    weak = Regime(("work", "work", "starved", "starved", "spin"), nic=0.0, nic_speed=3_125_000_000)
    held = run(like(COMPUTE, seconds=20), like(weak, seconds=30))
    assert held.verdict == "compute"
    assert 0.35 <= held.engine.last.vote.scores["compute"] < 0.5
    fresh = run(like(weak, seconds=30))
    assert fresh.verdict == "mixed"


def test_spin_wait_vetoes_compute_at_once() -> None:
    """Compute -> network: the first window where the GPUs spin more than they work drops compute,
    without waiting for the confirmations."""
    r = run(like(COMPUTE, seconds=20), like(NETWORK, seconds=30), cfg=fast_cfg(confirmations=5))
    for ev in r.evaluations:
        f = ev.vote.features
        if f.spin_share > f.working_share:
            assert ev.current is not None and ev.current.verdict != "compute", ev.current.reasons


SPIN_OR_STARVE = st.lists(st.sampled_from(["spin", "starved", "work"]), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    phases=SPIN_OR_STARVE,
    gpm=st.booleans(),
    nic=st.sampled_from([0.0, 5e6, 3e9]),
    disk=st.sampled_from([0.0, 300e6]),
    cores=st.sampled_from([0.2, 3.95]),
    warm=st.booleans(),
)
def test_a_spin_waiting_window_is_never_called_compute(phases, gpm, nic, disk, cores, warm) -> None:
    regime = Regime(tuple(phases), gpm=gpm, nic=nic, nic_speed=3_125_000_000, disk_read=disk, cores=cores)
    start = [like(COMPUTE, seconds=15, gpm=gpm)] if warm else []
    r = run(*start, like(regime, seconds=25), cfg=fast_cfg(confirmations=2))
    for ev in r.evaluations:
        f = ev.vote.features
        if f.spin_share > f.working_share:
            assert ev.vote.verdict != "compute"
            assert ev.current is None or ev.current.verdict != "compute"


def test_spin_at_low_power_before_idle_power_is_learned() -> None:
    """A GPU that has only ever spun: the learned minimum is the spin power itself, but the default
    idle share of the limit keeps the spin below the work line."""
    r = run(like(SYNC, gpm=False, phases=("spin",)))
    assert r.verdict == "sync-wait"
    assert r.engine.baselines.idle_power["GPU-0000"] == 85.0


def test_warm_up_after_a_job_starts() -> None:
    cfg = fast_cfg(warmup="8s", confirmations=2)
    r = run(like(IDLE, seconds=20), cfg=cfg)
    assert r.verdict == "idle"
    start = r.t
    r.feed([like(STORAGE, seconds=30)])
    during = [e for e in r.evaluations if start < e.wall - 1_700_000_000.0 <= start + 8]
    assert during and all(e.held == "warming up" and e.current.verdict == "idle" for e in during)
    assert r.verdict == "data/storage"
    switched = next(e for e in r.evaluations if e.changed and e.current.verdict == "data")
    # after warm-up the window refills from the job's samples only, then needs its confirmations
    assert switched.wall - 1_700_000_000.0 > start + 8


def test_processes_running_when_the_agent_starts_do_not_warm_up() -> None:
    r = run(like(CPU, seconds=30), cfg=fast_cfg(warmup="1h"))
    assert r.verdict == "data/cpu"
    assert all(e.held != "warming up" for e in r.evaluations)


def test_no_verdict_change_while_a_checkpoint_is_written() -> None:
    cfg = fast_cfg(confirmations=2)
    eng = Engine(cfg)
    r = Run(eng).feed([like(COMPUTE, seconds=20)])
    assert r.verdict == "compute"
    eng.checkpoint("requested", "ev-1", r.t)
    # the checkpoint write: GPUs idle, the disk and iowait busy, for far longer than the window
    r.feed([like(STORAGE, phases=("starved",), seconds=40)])
    assert r.verdict == "compute"
    held = [e for e in r.evaluations if e.held == "checkpoint in progress"]
    assert len(held) >= 15 and all(e.vote.verdict == "data" for e in held[5:])
    eng.checkpoint("completed", "ev-1", r.t)
    r.feed([like(COMPUTE, seconds=30)])
    assert r.verdict == "compute"
    assert eng.changes_total == 0
    # afterwards the window starts from the answer: no data vote from the checkpoint's samples
    after = r.evaluations[len(r.evaluations) - 15 :]
    assert all(e.vote.verdict == "compute" for e in after if e.held is None)


@pytest.mark.parametrize(
    "save",
    [
        # one idle window with a sliver of spin (an averaged reading smears the step before the
        # save): the lab's checkpoint run read idle at 1% work / 4% spin before this held
        ("starved",) * 9 + ("spin",),
        # the ranks that do not write wait at the barrier for the one that does
        ("spin", "spin", "starved"),
    ],
    ids=["idle with a sliver of spin", "barrier spin"],
)
def test_a_checkpoint_hold_is_not_broken_by_the_spin_veto(save: tuple[str, ...]) -> None:
    cfg = fast_cfg(confirmations=2)
    eng = Engine(cfg)
    r = Run(eng).feed([like(COMPUTE, seconds=20)])
    assert r.verdict == "compute"
    eng.checkpoint("requested", "ev-1", r.t)
    r.feed([like(SYNC, phases=save, nic=0.0, nic_other=0.0, seconds=20)])
    held = [e for e in r.evaluations if e.held == "checkpoint in progress"]
    # the veto would have fired: the GPUs spun more than they worked in these windows
    assert any(e.vote.detail.compute_vetoed for e in held), [e.vote.features for e in held]
    assert r.verdict == "compute" and eng.changes_total == 0
    eng.checkpoint("completed", "ev-1", r.t)
    # outside a checkpoint the same windows drop compute at once
    fresh = Run(Engine(cfg)).feed([like(COMPUTE, seconds=20), like(SYNC, phases=save, nic=0.0, seconds=20)])
    assert fresh.verdict != "compute"


def test_an_unanswered_checkpoint_stops_holding_after_the_maximum() -> None:
    cfg = fast_cfg(confirmations=2, checkpoint_hold_max="20s")
    eng = Engine(cfg)
    r = Run(eng).feed([like(COMPUTE, seconds=20)])
    eng.checkpoint("requested", "ev-2", r.t)
    r.feed([like(STORAGE, seconds=60)])
    assert r.verdict == "data/storage"
    assert eng.checkpoints == {}


def test_other_checkpoint_phases_do_not_end_the_hold() -> None:
    eng = Engine(fast_cfg())
    eng.checkpoint("requested", "a", 1.0)
    eng.checkpoint("completed", "b", 2.0)  # another episode's answer
    assert "a" in eng.checkpoints
    eng.checkpoint("missed", "a", 3.0)
    assert eng.checkpoints == {}


def test_sustained_verdicts_are_published_once_and_cleared() -> None:
    cfg = fast_cfg(sustain="10s", confirmations=2)
    r = run(like(COMPUTE, seconds=20), like(NETWORK, seconds=30), like(COMPUTE, seconds=30), cfg=cfg)
    events = [ev for e in r.evaluations for ev in e.events]
    assert [(ev.verdict, ev.cleared) for ev in events] == [("network", False), ("network", True)]
    started, cleared = events
    assert started.previous == "compute"
    assert any("NIC eth0" in x for x in started.reasons)
    assert "eRDMA" in started.hint
    assert started.scores["network"] > 0.5
    assert cleared.reasons[0] == "now compute"
    assert cleared.since == started.since
    change = next(e for e in r.evaluations if e.changed and e.current.verdict == "network")
    publish = next(e for e in r.evaluations if e.events)
    assert publish.wall - change.wall >= 10


def test_short_or_unpublished_verdicts_make_no_event() -> None:
    r = run(like(COMPUTE, seconds=20), like(NETWORK, seconds=30), cfg=fast_cfg(sustain="1h"))
    assert r.verdict == "network"
    assert not [ev for e in r.evaluations for ev in e.events]
    r2 = run(like(IDLE, seconds=20), like(COMPUTE, seconds=40), cfg=fast_cfg(sustain="0s", warmup="0s"))
    assert r2.verdict == "compute"
    assert not [ev for e in r2.evaluations for ev in e.events]  # compute is not in `publish`


def test_history_records_every_evaluation() -> None:
    r = run(like(COMPUTE, seconds=20), cfg=fast_cfg(history=5))
    items = list(r.engine.recent())
    assert len(items) == 5 and r.engine.evaluations == 9  # at t = 3, 5, ... 19
    assert items[-1]["verdict"] == "compute" and items[-1]["vote"] == "compute"
    assert set(items[-1]["scores"]) == {"compute", "data", "network", "sync-wait", "host", "idle"}
    assert any("GPU" in r for r in items[-1]["reasons"]), items[-1]  # the vote's own why, numbers in it


def test_evaluation_schedule_follows_the_snapshot_clock() -> None:
    r = run(like(COMPUTE, seconds=21), cfg=fast_cfg(evaluate_every="3s"))
    walls = [e.wall - 1_700_000_000.0 for e in r.evaluations]
    assert walls == [4.0, 7.0, 10.0, 13.0, 16.0, 19.0]


def test_the_engines_memo_changes_nothing() -> None:
    """Memoized tallies and running sums give exactly the pure function's verdict, also across a
    device appearing mid-run (a new epoch of the running sums) and a relearned idle power."""

    from classifier_synth import snapshot

    from agent.classifier.samples import sample_from_snapshot, series
    from agent.classifier.verdict import classify

    eng = Engine(fast_cfg(confirmations=2))
    regimes = [like(COMPUTE, seconds=12), like(STORAGE, seconds=14), like(NETWORK, gpm=False, seconds=14)]
    t = 0
    checked = 0
    for r in regimes:
        for k in range(r.seconds):
            t += 1
            s = sample_from_snapshot(snapshot(t, float(t), r, r.phases[k % len(r.phases)]))
            if t > 20:  # a second disk shows up
                s = s._replace(disk_read=series({**dict(s.disk_read.items()), "vdb": 5e6}))
            eng.settle()
            baselines, current = eng.baselines, eng.current.verdict if eng.current else None
            ev = eng.add(s)
            if ev is None:
                continue
            pure = classify(eng.window(), baselines, eng.cfg, current)
            assert pure.scores == pytest.approx(ev.vote.scores)
            assert pure.verdict == ev.vote.verdict and pure.reasons == ev.vote.reasons
            checked += 1
    assert checked >= 15


def test_a_tick_without_the_process_collector_is_no_new_job() -> None:
    from dataclasses import replace

    from classifier_synth import snapshot

    from agent.sources.processes.part import ProcessPart

    eng = Engine(fast_cfg(warmup="30s"))
    for t in range(1, 40):
        snap = snapshot(t, float(t), COMPUTE, "work")
        if t == 20:  # the process collector missed it; NVML still lists the pid
            snap = replace(snap, processes=ProcessPart(()))
        eng.add_snapshot(snap)
    assert eng.warmup_until == float("-inf") and eng.current.verdict == "compute"
    # the same pid with another start time is another process: a new job
    snap = snapshot(40, 40.0, COMPUTE, "work")
    other = replace(snap.parts["processes"].processes[0], start_time_ticks=99999)
    eng.add_snapshot(replace(snap, processes=ProcessPart((other,))))
    assert eng.warmup_until == 40.0 + 30.0


def test_a_kept_data_verdict_keeps_its_sub_reason() -> None:
    """While a data/cpu verdict waits for its successor's confirmations, windows without any data
    pressure must not relabel it data/storage."""
    r = run(like(CPU, seconds=30), like(IDLE, seconds=30), cfg=fast_cfg(confirmations=4))
    labels = r.verdicts()
    assert "data/storage" not in labels
    assert labels[labels.index("data/cpu") :].count("data/cpu") >= 2 and labels[-1] == "idle"


def test_running_tallies_are_exactly_combine() -> None:
    """The window's GPU counts kept up to date as it slides (by whole steps, a jump ahead, a window
    rebuilt from new tallies, an empty one, tallies pushed and dropped between evaluations) equal
    adding up the window's tallies afresh."""
    import random

    from agent.classifier.tallies import GpuTally, RunningTallies, combine

    rnd = random.Random(11)

    def one() -> GpuTally:
        n = rnd.randint(0, 4)
        idx = tuple(sorted(rnd.sample(range(6), n)))
        # each GPU's thousandths not working (a share of its sample, as the tally splits it)
        nw = tuple((i, rnd.choice([1000, 500, rnd.randint(1, 999)])) for i in idx if rnd.random() < 0.5)
        waiting = sum(u for _, u in nw)
        utils = tuple(rnd.choice([0.0, 0.25, 0.97, 1.0, rnd.random()]) for _ in idx)
        return GpuTally(
            n,
            n * 1000 - waiting,
            waiting // 2,
            waiting - waiting // 2,
            utils,
            rnd.random() * n,
            rnd.random(),
            rnd.random(),
            idx,
            nw,
            tuple((i, rnd.randint(1, 500)) for i in idx if rnd.random() < 0.4),  # spinning
            tuple((i, rnd.choice([4, 8])) for i in idx if rnd.random() < 0.3),
            frozenset(rnd.sample(["sm", "power", "utilization"], rnd.randint(0, 2))),
        )

    stream = [one() for _ in range(400)]
    running = RunningTallies()
    start = end = 0
    for _ in range(200):
        r = rnd.random()
        if r < 0.05:  # the idle power was relearned: every tally of the window made again
            stream[start:end] = [t._replace() for t in stream[start:end]]
        new_end = min(len(stream), end + rnd.randint(0, 6))
        new_start = max(start, new_end - rnd.randint(0, 60)) if r > 0.02 else new_end  # sometimes empty
        if rnd.random() < 0.5:  # as the engine does: each tally pushed as it comes, the oldest dropped
            for t in stream[end:new_end]:
                running.push(t)
            for t in stream[start:new_start]:
                running.drop(t)
        start, end = new_start, new_end
        window = stream[start:end]
        assert running.combine(window) == combine(window)


def test_series_are_sorted_shared_and_merge_both_directions() -> None:
    """A family's values in key order whatever order the source listed them in, the key tuple
    shared between samples; rx and tx merged by the larger, over the devices of either."""
    import random

    from agent.classifier.samples import _max_rx_tx, port_name, series

    rnd = random.Random(5)
    names = [f"eth{i}" for i in range(12)]
    shared: dict[tuple[str, ...], tuple[str, ...]] = {}
    for _ in range(300):
        picked = rnd.sample(names, rnd.randint(1, 6))
        rx = {k: rnd.choice([0.0, rnd.random() * 1e9]) for k in picked}
        tx_keys = picked if rnd.random() < 0.6 else rnd.sample(names, rnd.randint(1, 6))
        tx = {k: rnd.choice([0.0, rnd.random() * 1e9]) for k in rnd.sample(tx_keys, len(tx_keys))}
        s = series(rx)
        assert s.keys == tuple(sorted(rx)) and s.values == tuple(rx[k] for k in s.keys)
        assert shared.setdefault(s.keys, s.keys) is s.keys  # one tuple per key set
        m = _max_rx_tx(rx, tx)
        want = {k: max(rx.get(k, 0.0), tx.get(k, 0.0)) for k in rx.keys() | tx.keys()}
        assert dict(m.items()) == want and list(m.keys) == sorted(want)
        ports = _max_rx_tx({(k, 1): v for k, v in rx.items()}, {(k, 1): v for k, v in tx.items()}, port_name)
        assert dict(ports.items()) == {f"{k}/1": v for k, v in want.items()}


def test_baselines_learned_from_gathered_samples_equal_learning_from_the_window() -> None:
    """The engine gathers what each part of the baselines learns from as samples arrive; over a run
    with a device appearing, a checkpoint cutting the window, a new job and NFS mounts without READs
    now and then, every learning equals the pure ``learn`` on that evaluation's window."""
    import random

    from classifier_synth import snapshot

    from agent.classifier.baselines import learn
    from agent.classifier.samples import sample_from_snapshot, series

    rnd = random.Random(3)
    eng = Engine(fast_cfg(confirmations=2))
    regimes = [
        like(STORAGE, seconds=40),
        like(NETWORK, gpm=False, seconds=40),
        like(COMPUTE, pid=77, seconds=40),
    ]
    t = 0
    learned = relearned_rtt = 0
    for r in regimes:
        for k in range(r.seconds):
            t += 1
            s = sample_from_snapshot(snapshot(t, float(t), r, r.phases[k % len(r.phases)]))
            s = s._replace(disk_read=series({"vda": rnd.random() * 1e8, **({"vdb": 5e6} if t > 50 else {})}))
            ops = 0.0 if rnd.random() < 0.2 else rnd.uniform(50, 150)
            rtt = rnd.uniform(0.5, 1.0) * 0.01 * (1 - t / 200)  # the path gets faster: RTTs relearned
            s = s._replace(nfs_ops=series({"/mnt/data": ops}), nfs_rtt_time=series({"/mnt/data": rtt * ops}))
            if t == 70:
                eng.checkpoint("requested", "c1", float(t))
            if t == 73:
                eng.checkpoint("completed", "c1", float(t))
            eng.settle()  # the learning the last evaluation left for this tick
            before, stamps = eng.baselines, dict(eng.learned_at)
            if eng.add(s) is None:
                continue
            parts = [p for p, at in eng.learned_at.items() if stamps.get(p) != at]
            if parts:
                eng.settle()
                learned += len(parts)
                assert eng.baselines == learn(eng.window(), before, parts), (t, parts)
                relearned_rtt += eng.baselines.nfs_rtt is not before.nfs_rtt
    assert learned >= 30 and relearned_rtt >= 3


@pytest.mark.parametrize(
    ("votes", "adopted_at"),
    [
        (["network", "network"], 1),
        (["network", "mixed", "network"], 2),  # one undecided window: no vote against the candidate
        (["network", "mixed", "mixed", "network"], None),  # two: the candidate starts over
        (["network", "sync-wait", "network"], None),  # another class's vote resets it
        (["mixed", "network", "mixed", "network"], 3),
    ],
)
def test_confirmations_across_an_undecided_window(monkeypatch, votes, adopted_at) -> None:
    import dataclasses

    import agent.classifier.engine as engine_module

    real = engine_module.classify
    script = iter(["compute"] * 6 + votes)

    def scripted(*args, **kwargs):
        v = real(*args, **kwargs)
        want = next(script, None)
        return v if want is None else dataclasses.replace(v, verdict=want, sub_reason=None)

    monkeypatch.setattr(engine_module, "classify", scripted)
    r = run(like(COMPUTE, seconds=60), cfg=fast_cfg(confirmations=2, warmup="0s"))
    labels = r.verdicts()
    start = 6  # the scripted votes follow six computes
    assert labels[start - 1] == "compute"
    after = labels[start : start + len(votes)]
    if adopted_at is None:
        assert "network" not in after, after
    else:
        assert after.index("network") == adopted_at, after


def test_a_held_data_verdict_keeps_its_sub_reason_through_another_classs_votes() -> None:
    """data/storage in force, then network with a stray sliver of CPU pressure (a starved sample in
    ten beside a busy trainer): while the hysteresis holds data, it is still data/storage, not
    data/cpu; the sub-reason follows the window only where it scores data itself."""
    from classifier_synth import NETWORK, STORAGE, fast_cfg, like, run

    phases = ("spin", "spin", "work") * 3 + ("starved",)
    sliver = like(NETWORK, phases=phases, cores=3.9, allowed=4.0, seconds=20)
    r = run(like(STORAGE, seconds=30), sliver, cfg=fast_cfg())
    after = [e for e in r.evaluations if e.wall > 1_700_000_000.0 + 30]
    held = [e for e in after if e.vote.verdict != "data" and e.current.verdict == "data"]
    assert any(e.vote.detail.data_cpu > 0 for e in held), [(e.vote.label, e.current.label) for e in after]
    assert {e.current.label for e in held} == {"data/storage"}, [e.current.label for e in held]
    assert r.verdict == "network"
