"""Each GPU of one sample booked by the goodput ledger from the classifier's latest window: the
ledger sorts GPUs by the classifier's own rule (``agent.classifier.gpus.gpu_class``) and splits a
wait by the window's pressures (``agent.ledger.assign``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from classifier_synth import COMPUTE, CPU, IDLE, NETWORK, STORAGE, SYNC, run, snapshot

from agent.classifier.features import Features
from agent.classifier.gpus import GpuClass, gpu_class
from agent.classifier.published import published
from agent.classifier.samples import Sample, sample_from_snapshot
from agent.core.vocabulary import Bucket
from agent.ledger.assign import BUCKETS, GpuState, LedgerReading, Pressures, Tick, assign, gpu_state


def book(s: Sample, f: Features | None, engine, job: bool = True) -> dict[Bucket, float]:
    """Seconds per bucket for one 1 s tick of ``s``'s GPUs."""
    gpus = tuple(LedgerReading(g.uuid, g.up, g.util, g.sm, g.power, g.limit, job) for g in s.gpus)
    view = published(engine.baselines, f, engine.cfg)  # what the classifier part hands the ledger
    p = view.pressures
    if f is not None:
        assert p == Pressures(f.storage_pressure, f.cpu_pressure, f.network_pressure, f.network_pressure_spin)
    states = [gpu_state(g, view) for g in gpus]
    out = assign(Tick(1.0, gpus, job, p), states)
    return {b: v for b, v in zip(BUCKETS, out, strict=True) if v > 0}


@pytest.mark.parametrize(
    ("regime", "phase", "bucket"),
    [
        (COMPUTE, "work", Bucket.PRODUCTIVE),
        (STORAGE, "starved", Bucket.DATA_STORAGE),
        (STORAGE, "work", Bucket.PRODUCTIVE),
        (CPU, "starved", Bucket.DATA_CPU),
        (NETWORK, "spin", Bucket.NETWORK),
        (SYNC, "spin", Bucket.SYNC_WAIT),
        (IDLE, "starved", Bucket.NO_JOB),
    ],
)
@pytest.mark.parametrize("gpm", [True, False], ids=["gpm", "power-only"])
def test_one_sample_per_gpu(regime, phase, bucket, gpm) -> None:
    r = run(replace(regime, gpm=gpm))
    e = r.engine
    s = sample_from_snapshot(snapshot(999, r.t + 1, replace(regime, gpm=gpm), phase))
    got = book(s, e.last.vote.features, e, job=regime.trainer)
    assert sum(got.values()) == pytest.approx(2.0)  # both GPUs, the whole second
    assert max(got, key=got.get) == bucket, got
    assert got[bucket] >= 1.0, got  # at least half of it


def test_a_lost_gpu_is_idle_and_before_any_evaluation_waits_are_idle() -> None:
    r = run(CPU)
    snap = snapshot(999, r.t + 1, CPU, "starved")
    lost = replace(snap.parts["gpu"].gpus[0], up=False)
    s = sample_from_snapshot(
        replace(snap, gpu=replace(snap.parts["gpu"], gpus=(lost, snap.parts["gpu"].gpus[1])))
    )
    e = r.engine
    assert gpu_class(s.gpus[0], e.baselines, e.cfg) is GpuClass.DOWN
    assert gpu_state(s.gpus[0], published(e.baselines, None, e.cfg)) is GpuState.DOWN
    got = book(s, e.last.vote.features, e)
    assert got[Bucket.IDLE] >= 1.0 and got[Bucket.DATA_CPU] >= 0.5, got
    assert book(s, None, e) == {Bucket.IDLE: pytest.approx(2.0)}
