"""Each way a GPU may lack the readings the agent prefers (the driver's utilization buffer, the energy
counter, GPM, and MIG, where the parent GPU answers no utilization at all): the collector falls back
in its stated order, says which source it used, and the classifier still splits the GPUs' time and
gives a verdict. The fake averages its readings as a real GPU does (running integrals): a GPU that
computes 3/4 of each step and spins in a collective for the rest reads as that mix."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from gpu_fixtures import fake_nvml_library, no_collection_pauses, share_on  # noqa: F401

from agent.classifier.engine import Engine
from agent.classifier.tallies import combine, tally
from agent.config.classifier import ClassifierSection
from agent.devtools.fake_nvml import FakeNvml
from agent.snapshot import NodeSnapshot
from agent.sources.gpu.collector import GpuCollector
from agent.sources.gpu.part import GpuPart
from agent.sources.gpu.part import GpuReadingSource as Src
from agent.sources.gpu.rates import GpuRates
from agent.sources.gpu.status import lines, summary

COMPUTE = {"utilization_gpu": 97, "power_mw": 560_000, "sm_active": 82.0, "tensor_active": 61.0}
SPIN = {"utilization_gpu": 100, "power_mw": 115_000, "sm_active": 3.0, "tensor_active": 0.0}
IDLE = {"utilization_gpu": 0, "power_mw": 72_000, "sm_active": 0.0, "tensor_active": 0.0}
NO_GPM = {"sm_active": None, "tensor_active": None, "dram_active": None}
STEP = 0.4  # seconds: 3/4 computing, 1/4 spinning
MIX_STEP = 0.8  # the same mix in steps long enough to show full work in whole ticks
# the shares come from a writer thread's timing against the collector's ticks: alone, not side by side
pytestmark = pytest.mark.serial
CFG = ClassifierSection(window="3s", evaluate_every="1s", warmup="0s", confirmations=1, sustain="0s")

CASES: dict[str, tuple[dict[str, Any], Src, Src]] = {
    # what the GPUs lack -> (their state, utilization source, power source)
    "everything": ({}, Src.SAMPLES, Src.ENERGY),
    "no sample buffer": ({"unsupported": ["nvmlDeviceGetSamples"]}, Src.RATES, Src.ENERGY),
    "no energy counter": ({"energy_counter": False}, Src.SAMPLES, Src.AVERAGE),
    "no GPM": (NO_GPM, Src.SAMPLES, Src.ENERGY),
    # MIG: the parent GPU answers NOT_SUPPORTED for utilization, GPM still reports its activity
    "MIG": (
        {"unsupported": ["nvmlDeviceGetSamples", "nvmlDeviceGetUtilizationRates"]},
        Src.GPM,
        Src.ENERGY,
    ),
}


class Workload:
    """Both GPUs compute 3/4 of each step and spin for the rest, written as the phases change."""

    def __init__(
        self, fake: FakeNvml, lacks: dict[str, Any], phases: list[tuple[dict[str, Any], float]]
    ) -> None:
        self.fake, self.lacks, self.phases = fake, lacks, phases
        self.done = threading.Event()
        self.log: list[tuple[float, bool]] = []  # (monotonic time, computing) at each change
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _show(self, fields: dict[str, Any]) -> None:
        for d in self.fake.state["devices"]:
            d.update(fields, processes=[{"pid": 4242, "used_memory_bytes": 1 << 30}], **self.lacks)
        self.log.append((self.fake.write(), fields is COMPUTE))

    def computing(self, start: float, end: float) -> float:
        """The share of [start, end] the GPUs were computing, by the writer's own log."""
        return share_on(self.log, start, end)

    def _run(self) -> None:
        while not self.done.is_set():
            for fields, seconds in self.phases:
                self._show(fields)
                if self.done.wait(seconds):
                    return

    def __enter__(self) -> Workload:
        self._show(self.phases[0][0])
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(5)


def watch(
    tmp_path: Path, library: Path, monkeypatch, lacks, phases, seconds: float = 4.0, midway=None, tick=0.25
):
    """The collector every ``tick`` s for ``seconds`` under the workload; its parts and the engine.
    ``midway(work)`` is called once, half way through."""
    fake = FakeNvml(tmp_path / "nvml.json", gpus=2, averaged=True)
    monkeypatch.setenv("FAKE_NVML_STATE", str(fake.path))
    collector = GpuCollector(library=str(library))
    engine = Engine(CFG)
    parts: list[GpuPart] = []
    work = Workload(fake, lacks, phases)
    try:
        with no_collection_pauses(), work:
            start = time.monotonic()
            seq = 0
            while time.monotonic() - start < seconds:
                # the readings' time is when the collector began, as the fake's clock saw it: a clock
                # read after it returns is late by whatever held this thread in between
                taken = time.monotonic()
                part = collector.collect()
                seq += 1
                engine.add_snapshot(NodeSnapshot(seq, time.time(), taken, parts={"gpu": part}))
                parts.append(part)
                if midway is not None and time.monotonic() - start >= seconds / 2:
                    midway(work)
                    midway = None
                time.sleep(tick)
    finally:
        collector.close()
    return parts, engine, work


@pytest.mark.parametrize("case", list(CASES))
def test_each_fallback_names_its_source_splits_the_time_and_gives_a_verdict(
    case: str, tmp_path: Path, fake_nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lacks, util_source, power_source = CASES[case]
    # steps of 0.8 s: each 0.6 s compute phase holds whole 0.25 s ticks, so the GPUs show their full
    # work in the run and learn its level (with 0.3 s phases a run could hold none, learn a level
    # below the real one, and read 0.85 of work for 0.73: a failed clean clone, 2026-12-06). Every
    # tick with a spin in it is still a mix
    phases = [(COMPUTE, 0.75 * MIX_STEP), (SPIN, 0.25 * MIX_STEP)]
    parts, engine, work = watch(tmp_path, fake_nvml_library, monkeypatch, lacks, phases)
    last = parts[-1].gpus[0]
    assert (last.utilization_source, last.power_source) == (util_source, power_source)
    status = summary(parts[-1], GpuRates())
    assert status["gpus"][0]["readings"]["utilization"] == util_source
    assert f"util from {util_source}" in lines(status)[1] and f"power from {power_source}" in lines(status)[1]

    # the second half of the run, split as the classifier splits it: a mix, not whole samples
    window = engine.window()[len(engine.window()) // 2 :]
    g = combine([tally(s, engine.baselines, engine.cfg) for s in window])
    working, spinning = g.share(g.working), g.share(g.spinning)
    # against what the writer really did in each of those samples (about 3/4; a busy box stretches
    # phases), each from the tick before it, and weighted as the window weighs them: one sample each.
    # A thread held up (a collection of a large heap holds both threads) makes one long sample of the
    # stretched phase: over time the GPUs computed 0.90 of it, sample by sample 0.43 (a clean clone)
    before = engine.window()[len(engine.window()) // 2 - 1 :]
    truth = sum(work.computing(a.t, b.t) for a, b in pairwise(before)) / len(window)
    assert 0.2 <= truth <= 0.95, truth  # a mix, or the test shows nothing
    assert abs(working - truth) <= 0.12 and abs(spinning - (1 - truth)) <= 0.12, (
        case,
        working,
        spinning,
        truth,
    )
    assert engine.current is not None and engine.current.verdict == "compute", engine.last


def test_an_idle_gpus_empty_buffer_is_idle_not_unsupported(
    tmp_path: Path, fake_nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver records nothing while the GPU idles (NOT_FOUND): that is no kernel all tick, and
    the status says the buffer was empty, not that the GPU has none."""
    parts, engine, _ = watch(tmp_path, fake_nvml_library, monkeypatch, {}, [(IDLE, 1.0)], seconds=2.5)
    g = parts[-1].gpus[0]
    assert (g.utilization, g.utilization_source, g.utilization_samples) == (0.0, Src.SAMPLES_IDLE, 0)
    assert engine.current is not None and engine.current.verdict == "idle", engine.last


def test_a_buffer_whose_clock_steps_back_is_read_on(
    tmp_path: Path, fake_nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The buffer's timestamps are "CPU timestamp in microseconds" (nvml.h): where that is the wall
    clock, NTP setting it back takes them back too, and asking for the samples after the last one
    seen would find none for as long as the step (here decades: the fake's clock turns from
    ``realtime`` to ``boottime``), reading a working GPU as idle. The collector finds the step and
    reads on from the buffer's newest sample."""
    lacks: dict[str, Any] = {"sample_clock": "realtime"}
    phases = [(COMPUTE, 0.75 * STEP), (SPIN, 0.25 * STEP)]
    parts, _, _ = watch(
        tmp_path, fake_nvml_library, monkeypatch, lacks, phases, seconds=6.0,
        midway=lambda work: work.lacks.update(sample_clock="boottime"),
    )  # fmt: skip
    half = len(parts) // 2
    before = [p.gpus[0] for p in parts[2:half]]
    assert all(g.utilization_source == Src.SAMPLES for g in before), [g.utilization_source for g in before]
    # within 1.5 s of the step (a period and a half of nothing new, then the whole buffer read once)
    after = [p.gpus[0] for p in parts[half + 6 :]]
    assert after and all(g.utilization_source == Src.SAMPLES for g in after), [
        (g.utilization_source, g.utilization) for g in after
    ]
    utils = [g.utilization for g in after]
    assert all(u is not None and u >= 0.9 for u in utils), utils


@pytest.mark.parametrize("case", ["GPM", "no GPM"])
def test_a_tick_shorter_than_the_drivers_period_reads_no_spin_that_never_was(
    case: str, tmp_path: Path, fake_nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Utilization covers the driver's period (here 0.8 s, within NVML's 1/6 s to 1 s), so at 0.1 s
    ticks it still counts the kernels of a step the work measure (SM activity, or power above idle,
    both over the tick) no longer shows: their difference read as spinning, a collective's
    busy-wait, in a job that never spins. With GPM the tick's kernel share is GPM's graphics
    activity, between the same two samples as SM activity; without, power is taken over the span
    the utilization figure covers."""
    lacks = {"utilization_average_seconds": 0.8, "sample_period_seconds": 0.8}
    if case == "no GPM":
        lacks.update(NO_GPM)
    phases = [(COMPUTE, 0.3), (IDLE, 0.3)]
    _, engine, work = watch(tmp_path, fake_nvml_library, monkeypatch, lacks, phases, seconds=5.0, tick=0.1)
    window = engine.window()[len(engine.window()) // 3 :]
    g = combine([tally(s, engine.baselines, engine.cfg) for s in window])
    working, spinning = g.share(g.working), g.share(g.spinning)
    truth = work.computing(window[0].t - 0.8, window[-1].t)
    assert 0.3 <= truth <= 0.7, truth
    assert spinning <= 0.06, (case, working, spinning, truth)
    assert abs(working - truth) <= 0.15, (case, working, spinning, truth)
