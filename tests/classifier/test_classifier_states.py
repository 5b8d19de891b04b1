"""Each GPU of one sample in the goodput ledger's states, from the classifier's latest window."""

from __future__ import annotations

from dataclasses import replace

import pytest
from classifier_synth import COMPUTE, CPU, IDLE, NETWORK, STORAGE, SYNC, run, snapshot

from agent.classifier.gpus import GpuClass, gpu_class
from agent.classifier.samples import sample_from_snapshot
from agent.classifier.states import gpu_states
from agent.core.vocabulary import Bucket


@pytest.mark.parametrize(
    ("regime", "phase", "state"),
    [
        (COMPUTE, "work", Bucket.PRODUCTIVE),
        (STORAGE, "starved", Bucket.DATA_STORAGE),
        (STORAGE, "work", Bucket.PRODUCTIVE),
        (CPU, "starved", Bucket.DATA_CPU),
        (NETWORK, "spin", Bucket.NETWORK),
        (SYNC, "spin", Bucket.SYNC_WAIT),
        (IDLE, "starved", Bucket.IDLE),
    ],
)
@pytest.mark.parametrize("gpm", [True, False], ids=["gpm", "power-only"])
def test_one_sample_per_gpu(regime, phase, state, gpm) -> None:
    r = run(replace(regime, gpm=gpm))
    e = r.engine
    s = sample_from_snapshot(snapshot(999, r.t + 1, replace(regime, gpm=gpm), phase))
    assert gpu_states(s, e.last.vote.features, e.baselines, e.cfg) == {0: state, 1: state}


def test_a_lost_gpu_has_no_state_and_before_any_evaluation_waits_are_idle() -> None:
    r = run(CPU)
    snap = snapshot(999, r.t + 1, CPU, "starved")
    lost = replace(snap.gpu.gpus[0], up=False)
    s = sample_from_snapshot(replace(snap, gpu=replace(snap.gpu, gpus=(lost, snap.gpu.gpus[1]))))
    assert gpu_class(s.gpus[0], r.engine.baselines, r.engine.cfg) is GpuClass.DOWN
    assert gpu_states(s, r.engine.last.vote.features, r.engine.baselines, r.engine.cfg) == {
        1: Bucket.DATA_CPU
    }
    assert gpu_states(s, None, r.engine.baselines, r.engine.cfg) == {1: Bucket.IDLE}
