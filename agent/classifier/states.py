"""Each GPU of one sample in the state the goodput ledger books (pure).

A working GPU is ``productive``. A waiting one is put down to what the classifier's latest window
says it waits for: a spinning GPU (in a collective) to the ``network`` where the link is loaded while
the GPUs spin, else ``sync-wait``; a starved one to the input pipeline (``data-storage`` or
``data-cpu``, whichever presses more) where it explains the starvation, else the ``network`` where that
is loaded, else ``idle``. With no training process on the node every waiting GPU is ``idle``.

    gpu_states(sample, engine.last.vote.features, engine.baselines, engine.cfg)
"""

from __future__ import annotations

from agent.classifier.baselines import Baselines
from agent.classifier.features import Features
from agent.classifier.gpus import GpuClass, gpu_class
from agent.classifier.samples import Sample
from agent.config.classifier import ClassifierSection
from agent.core.vocabulary import Bucket

PRESSING = 0.5  # a pressure from which it is what the GPU waits for


def wait_state(c: GpuClass, f: Features | None) -> Bucket | None:
    """The state of one GPU sample of class ``c``, given the window's features; None when down."""
    if c is GpuClass.DOWN:
        return None
    if c is GpuClass.WORKING:
        return Bucket.PRODUCTIVE
    if f is None or f.trainers == 0:
        return Bucket.IDLE
    if c is GpuClass.SPINNING:
        return Bucket.NETWORK if f.network_pressure_spin >= PRESSING else Bucket.SYNC_WAIT
    data = max(f.storage_pressure, f.cpu_pressure)
    if data >= PRESSING and data >= f.network_pressure:
        return Bucket.DATA_STORAGE if f.storage_pressure >= f.cpu_pressure else Bucket.DATA_CPU
    return Bucket.NETWORK if f.network_pressure >= PRESSING else Bucket.IDLE


def gpu_states(
    sample: Sample, features: Features | None, baselines: Baselines, cfg: ClassifierSection
) -> dict[int, Bucket]:
    """GPU index -> state, for the GPUs of ``sample`` that are up and read."""
    out = {}
    for g in sample.gpus:
        state = wait_state(gpu_class(g, baselines, cfg), features)
        if state is not None:
            out[g.index] = state
    return out
