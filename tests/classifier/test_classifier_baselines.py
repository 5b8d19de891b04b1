"""Learned capacities, idle power and NFS RTT baselines: learned, persisted, reloaded, never fatal."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest
from classifier_synth import COMPUTE, NETWORK, STORAGE, SYNC, Regime, fast_cfg, like, run

from agent.classifier import baselines as store
from agent.classifier.baselines import Baselines, capacity, idle_power
from agent.classifier.engine import Engine
from agent.sources.host.part import CpuTimes, HostPart, Pressure
from agent.sources.host.rates import host_rates


def test_learned_capacities_are_persisted_and_reloaded(tmp_path: Path) -> None:
    r = run(like(STORAGE, seconds=30), like(NETWORK, nic_speed=None, seconds=30))
    b = r.engine.baselines
    assert b.peaks["disk"]["vda"] == 200e6
    assert b.peaks["nic"]["eth0"] == 2.9e9
    assert b.idle_power["GPU-0000"] == 62.0
    assert b.nfs_rtt["/mnt/data"] == 0.004
    store.save(tmp_path, b)
    again = store.load(tmp_path)
    assert again == b
    # a restarted agent judges its first storage-bound window against what it learned before:
    # reads at half the learned peak are not "at capacity"
    half = like(STORAGE, disk_read=100e6, iowait=0.0, psi_io=0.0, seconds=30)
    fresh = run(half, engine=Engine(fast_cfg(), again))
    load = fresh.engine.last.vote.features.storage[0]
    assert load.capacity == 200e6 and load.source == "learned"
    assert load.utilization == pytest.approx(0.5, abs=0.02)
    assert fresh.verdict != "data/storage"
    without = run(half)  # without the history the same reads look like the device's peak
    assert without.engine.last.vote.features.storage[0].utilization == pytest.approx(1.0, abs=0.02)


def test_peaks_only_grow_and_need_a_sustained_rate() -> None:
    # one interval at 900 MB/s inside a window at 100 MB/s: the 90th percentile ignores it
    spiky = Regime(("starved",) * 9 + ("work",), disk_read=100e6)
    r = run(like(spiky, seconds=30))
    assert r.engine.baselines.peaks["disk"]["vda"] == 100e6
    r.feed([like(spiky, disk_read=50e6, seconds=30)])
    assert r.engine.baselines.peaks["disk"]["vda"] == 100e6


def test_a_peak_is_what_the_device_sustains_not_a_delayed_reads_stray() -> None:
    """A link held to 10 MB/s by tc, sampled every 100 ms on a busy box: two reads came late past
    their timestamps, so two samples read high and the next ones low. The 90th percentile learned
    13.5 MB/s, and the link at its cap then looked 26% idle; the busy samples' median is the cap."""
    mb = 1e6
    strays = [10, 10, 14, 6, 10, 10, 13.5, 6.5, 10, 10, 10, 10]
    window = [x * mb for x in strays]
    assert store.quantile(window, store.PEAK_QUANTILE) == 13.5 * mb
    assert store.sustained(window) == 10 * mb
    learned, _ = store._learn_peaks({"eth0": window}, {}, {"eth0": 10 * mb})
    assert learned == {"eth0": 10 * mb}
    # a lone burst in a quiet window is no capacity; a link busy only part of the window still is one
    assert store.sustained([0.0] * 11 + [50 * mb]) == 0.0
    assert store.sustained([0.0] * 8 + [9.9 * mb, 10 * mb, 10.1 * mb, 10 * mb]) == 10 * mb


def test_a_peak_needs_two_consecutive_windows_that_sustain_it() -> None:
    """A lab run (1.2 s windows): the first window of a job on a 20 Mbit/s link read 4.41 MB/s, the
    host's tx counter counting TCP's slow start into a cap beyond the host, which dropped the excess;
    every window after it sustained ~2.8 MB/s. With 4.41 learned, the link at its cap read 62-70% of
    its ceiling for the rest of the job and the node was called sync-wait instead of network."""
    mb = 1e6
    overshoot = [0.5, 3, 5, 6, 6, 5.5, 5, 4.4, 4.4, 4.4, 3.5, 3]
    capped = [2.7, 2.8, 2.9, 2.8, 2.7, 2.8, 2.9, 2.8, 2.8, 2.6, 2.9, 2.8]
    first = _learn_nic(overshoot, Baselines())
    assert first.peaks["nic"] == {}  # one window: seen once, not learned
    assert first.last_sustained["nic"]["eth0"] == pytest.approx(4.4 * mb)
    second = _learn_nic(capped, first)
    assert second.peaks["nic"]["eth0"] == pytest.approx(2.8 * mb)  # the lower of the two
    third = _learn_nic(overshoot, second)
    assert third.peaks["nic"]["eth0"] == pytest.approx(2.8 * mb)  # a lone transient later: neither
    # the window's rates are not saved, and a window that only moves them writes nothing new
    assert "last_sustained" not in json.dumps(third.to_json())
    assert third.saved_same(second) and not second.saved_same(first)
    assert Baselines.from_json(third.to_json()) == third


def _learn_nic(mbs: list[float], before: Baselines) -> Baselines:
    """One learning window whose samples read ``mbs`` MB/s on eth0 (as the engine passes it: the
    window's columns gathered)."""
    window = [STORAGE] * len(mbs)  # only its length counts once the columns are given
    return store.learn(window, before, ["nic"], {"nic": {"eth0": [x * 1e6 for x in mbs]}})  # type: ignore[arg-type]


def test_capacity_precedence() -> None:
    b = Baselines(peaks={"disk": {}, "nfs": {}, "nic": {"eth0": 40e6, "eth1": 1e6}, "rdma": {}})
    cfg = fast_cfg(nic_capacity={"eth2": "1GB/s"})
    assert capacity("nic", "eth2", b, cfg, link=3e9) == (1e9, "config")
    assert capacity("nic", "eth0", b, cfg, link=3e9) == (3e9, "link")
    assert capacity("nic", "eth0", b, cfg) == (40e6, "learned")
    assert capacity("nic", "eth1", b, cfg) == (None, "unknown")  # below learn_floor: a trickle
    assert capacity("nic", "eth0", b, fast_cfg(learn_capacities=False)) == (None, "unknown")


def test_idle_power_is_the_lower_of_learned_and_the_default_share() -> None:
    cfg = fast_cfg(idle_power_ratio=0.2)
    assert idle_power("u", 400.0, Baselines(idle_power={"u": 55.0}), cfg) == 55.0
    assert idle_power("u", 400.0, Baselines(idle_power={"u": 120.0}), cfg) == 80.0
    assert idle_power("v", 400.0, Baselines(), cfg) == 80.0


def test_sync_traffic_below_the_floor_is_not_learned_as_capacity() -> None:
    # a straggler's exchange bursts at the end of each wait (every third waiting sample here)
    r = run(like(SYNC, nic=1.2e6, nic_bursts=3, nic_other=0.1e6, nic_speed=None, seconds=40))
    assert r.verdict == "sync-wait"
    assert r.engine.baselines.peaks["nic"]["eth0"] < fast_cfg().learn_floor


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"version": 99}',
        '{"version": 1, "peaks_bytes_per_second": {"disk": {"vda": "fast"}}}',
        '{"version": 1, "idle_power_watts": {"GPU-1": -5}}',
        '{"version": 1, "peaks_bytes_per_second": []}',
        "[]",
    ],
)
def test_a_damaged_file_is_set_aside_and_learning_starts_afresh(tmp_path: Path, content: str) -> None:
    (tmp_path / store.FILE_NAME).write_text(content)
    assert store.load(tmp_path) == Baselines()
    assert (tmp_path / (store.FILE_NAME + ".bad")).read_text() == content
    assert not (tmp_path / store.FILE_NAME).exists()


def test_save_is_atomic_and_readable(tmp_path: Path) -> None:
    b = run(like(COMPUTE, seconds=20)).engine.baselines
    store.save(tmp_path / "sub", b)
    data = json.loads((tmp_path / "sub" / store.FILE_NAME).read_text())
    assert data["version"] == 1 and data["idle_power_watts"]["GPU-0001"] == 330.0
    assert [p.name for p in (tmp_path / "sub").iterdir()] == [store.FILE_NAME]


def test_missing_file_means_nothing_learned_yet(tmp_path: Path) -> None:
    assert store.load(tmp_path / "nope") == Baselines()


def test_psi_rates_come_from_the_total_counters() -> None:
    def host(io_total: float, full_total: float) -> HostPart:
        return HostPart(
            CpuTimes(1, 0, 1, 10, 0, 0, 0, 0),
            2,
            0.0,
            0.0,
            0.0,
            None,
            None,
            pressure={
                "io": Pressure(0, 0, 0, io_total, 0, 0, 0, full_total),
                "cpu": Pressure(0, 0, 0, 5.0),
            },
        )

    out = host_rates(host(10.0, 4.0), host(10.6, 4.2), 2.0)
    assert out.pressure_some_ratio == {"io": pytest.approx(0.3), "cpu": 0.0}
    assert out.pressure_full_ratio == {"io": pytest.approx(0.1)}
    backwards = host_rates(host(10.0, 4.0), host(9.0, 4.0), 1.0)
    assert "io" not in backwards.pressure_some_ratio


def test_learning_is_spread_over_evaluations_and_tiles_time() -> None:
    from agent.classifier.baselines import PARTS

    cfg = fast_cfg(window="14s", evaluate_every="2s")  # ceil(7 parts x 2 / 14) = 1 part per evaluation
    eng = Engine(cfg)
    learned: list[tuple[float, str]] = []
    original = eng._learn

    def spy(window, now):
        before = dict(eng.learned_at)
        original(window, now)
        learned.extend((now, p) for p in PARTS if eng.learned_at.get(p) != before.get(p))

    eng._learn = spy  # type: ignore[method-assign]
    run(like(STORAGE, seconds=60), engine=eng)
    per_evaluation: dict[float, int] = {}
    for now, _ in learned:
        per_evaluation[now] = per_evaluation.get(now, 0) + 1
    assert max(per_evaluation.values()) == 1
    for part in PARTS:
        times = [now for now, p in learned if p == part]
        assert len(times) >= 3
        assert all(b - a == 14 for a, b in pairwise(times))  # once per window
