"""GPM read in windows inside the tick (issue 32): which GPUs are (``WindowCadence``), how the classifier
splits a windowed sample, and the collector's window clock against the fake NVML in its averaging
mode, where GPM is the mean between two samples at least 100 ms apart, as NVIDIA documents."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from gpu_fixtures import fake_nvml_library, no_collection_pauses, share_on  # noqa: F401

from agent.classifier.baselines import Baselines, learn
from agent.classifier.gpus import shares
from agent.classifier.samples import GpuSample, sample_from_snapshot
from agent.config.classifier import ClassifierSection
from agent.devtools.fake_nvml import FakeNvml
from agent.runtime.sampler import Sampler
from agent.snapshot import NodeSnapshot
from agent.sources.gpu.collector import GpuCollector
from agent.sources.gpu.gpm_cadence import STEADY_TICKS, WindowCadence, windows_per_tick
from agent.sources.gpu.nvml_gpm import MIN_INTERVAL
from agent.sources.gpu.part import ActivityWindow, GpuPart
from agent.sources.gpu.rates import GpuRates
from agent.sources.gpu.status import lines, summary

CFG = ClassifierSection()
# a GPU hotter than the default full-work level (SM 82%): dense GEMMs read SM 95% and more
HOT = {"utilization_gpu": 97, "power_mw": 600_000, "sm_active": 95.0, "tensor_active": 70.0}
SPIN = {"utilization_gpu": 100, "power_mw": 115_000, "sm_active": 3.0, "tensor_active": 0.0}
IDLE = {"utilization_gpu": 0, "power_mw": 72_000, "sm_active": 0.0, "tensor_active": 0.0}


def w(seconds: float, busy: float, work: float) -> ActivityWindow:
    return ActivityWindow(seconds, busy, work)


# --- which GPUs are read in windows (pure) ------------------------------------------------------


def test_windows_per_tick_keep_each_window_over_gpms_floor() -> None:
    assert windows_per_tick(1.0) == 3
    assert windows_per_tick(0.5) == 2
    assert windows_per_tick(0.1) == 1  # the lab's 100 ms tick is a window already
    for interval in (0.3, 0.45, 0.6, 0.8, 1.0, 2.0, 5.0):
        n = windows_per_tick(interval)
        assert n == 1 or interval / n > MIN_INTERVAL, interval


def test_an_idle_gpu_is_never_read_in_windows() -> None:
    c = WindowCadence()
    assert not c.next(0.0, 0.0, ())
    assert not c.next(0.01, 0.0, ())
    assert not c.next(None, None, ())  # no GPM at all


def test_a_mixed_gpu_is_read_in_windows_every_tick() -> None:
    c = WindowCadence()
    assert c.next(0.6, 0.3, ())  # a busy GPU not yet seen in windows: look
    mixed = (w(0.25, 1.0, 0.8), w(0.25, 1.0, 0.03), w(0.25, 0.4, 0.3), w(0.25, 1.0, 0.8))
    for _ in range(3 * STEADY_TICKS):
        assert c.next(0.85, 0.48, mixed)


def test_a_steady_gpu_is_looked_at_again_every_steady_ticks_or_when_its_mean_moves() -> None:
    c = WindowCadence()
    steady = (w(0.25, 0.97, 0.80), w(0.25, 0.97, 0.81), w(0.25, 0.96, 0.80), w(0.25, 0.97, 0.82))
    assert c.next(0.97, 0.81, steady)  # alike inside the tick, but the tick before is not known
    assert not c.next(0.97, 0.81, steady)
    plan = [c.next(0.97, 0.81, ()) for _ in range(STEADY_TICKS)]
    assert plan == [False] * (STEADY_TICKS - 1) + [True]
    assert not c.next(0.97, 0.81, steady)
    assert not c.next(0.97, 0.80, ())
    assert c.next(0.97, 0.60, ())  # its mean moved: look at once


def test_phases_that_fill_whole_ticks_keep_a_gpu_in_windows() -> None:
    """Each tick all work or all spin: uniform windows in each, but means that swing."""
    c = WindowCadence()
    work = tuple(w(0.25, 0.97, 0.95) for _ in range(4))
    spin = tuple(w(0.25, 1.0, 0.03) for _ in range(4))
    for n in range(2 * STEADY_TICKS):
        assert c.next(*((0.97, 0.95, work) if n % 2 else (1.0, 0.03, spin)))


# --- the classifier splits a windowed sample window by window (pure) -----------------------------


class Reading:
    def __init__(self, util: float, sm: float, windows: tuple[ActivityWindow, ...]) -> None:
        self.uuid, self.up, self.power, self.limit = "GPU-0", True, 400.0, 700.0
        self.util, self.sm, self.windows = util, sm, windows


def mean_of(windows: tuple[ActivityWindow, ...]) -> tuple[float, float]:
    total = sum(x.seconds for x in windows)
    return (
        sum(x.seconds * x.busy for x in windows) / total,
        sum(x.seconds * x.work for x in windows) / total,
    )


def test_windows_split_as_their_mean_where_no_window_passes_the_full_work_level() -> None:
    """The split is linear below the full-work level: windows change nothing the mean had right."""
    windows = (w(0.3, 1.0, 0.7), w(0.2, 1.0, 0.05), w(0.25, 0.5, 0.4), w(0.25, 0.0, 0.0))
    util, sm = mean_of(windows)
    by_windows = shares(Reading(util, sm, windows), util, Baselines(), CFG)
    by_mean = shares(Reading(util, sm, ()), util, Baselines(), CFG)
    for a, b in zip(by_windows[:3], by_mean[:3], strict=True):
        assert a == pytest.approx(b, abs=1e-9)


def test_windows_count_a_hot_gpus_work_as_the_time_it_worked() -> None:
    """Half a tick at SM 95% (a GPU hotter than the 82% default it has not learned above) and half
    spinning: the mean reads 60% working, the windows 52%, the truth 50%."""
    windows = (w(0.25, 0.97, 0.95), w(0.25, 0.97, 0.95), w(0.25, 1.0, 0.03), w(0.25, 1.0, 0.03))
    util, sm = mean_of(windows)
    by_windows = shares(Reading(util, sm, windows), util, Baselines(), CFG)
    by_mean = shares(Reading(util, sm, ()), util, Baselines(), CFG)
    assert by_mean.working > 0.58
    assert abs(by_windows.working - 0.5) < 0.03
    assert by_windows.working + by_windows.spinning + by_windows.starved == pytest.approx(1.0)
    assert by_windows.spinning > by_mean.spinning  # the spin is no longer read as work


def test_a_hot_gpus_full_work_level_is_learned_from_its_windows() -> None:
    """A job that works half of every tick and spins the rest never shows its full-work level in a
    tick's mean (SM 49% at busy 98%): from the means nothing is learned and the default stays; from
    the windows that worked whole, the level is learned, and then the mean alone splits right too."""
    windows = (w(0.33, 0.97, 0.95), w(0.17, 0.97, 0.95), w(0.17, 1.0, 0.3), w(0.33, 1.0, 0.03))
    util, sm = mean_of(windows)

    def sample(t: float, windows: tuple[ActivityWindow, ...]) -> Any:
        # the full-work level learns from a sample's GPUs alone
        return SimpleNamespace(
            t=t, gpus=(GpuSample(0, "GPU-0", True, util, 400.0, 700.0, sm, windows=windows),)
        )

    by_means = learn([sample(float(t), ()) for t in range(10)], Baselines(), parts=("full_work",))
    assert by_means.full_work.get("GPU-0", 0.0) < CFG.full_work_sm  # the default stays in force
    learned = learn([sample(float(t), windows) for t in range(10)], Baselines(), parts=("full_work",))
    level = learned.full_work["GPU-0"]
    assert level == pytest.approx(0.95 / 0.97, abs=0.03)
    # the mean alone, against the learned level: half a tick at full work reads half working
    split = shares(Reading(util, sm, ()), util, learned, CFG)
    assert split.working == pytest.approx(sm / level) and abs(split.working - 0.55) < 0.02
    assert shares(Reading(util, sm, ()), util, by_means, CFG).working > 0.65


# --- the collector's window clock, against the fake NVML --------------------------------------


class Phases:
    """GPU 0 alternates ``on`` and ``off`` every ``seconds``; GPU 1 stays as ``other`` (None: as
    GPU 0)."""

    def __init__(self, fake: FakeNvml, on: dict, off: dict, seconds: float, other: dict | None) -> None:
        self.fake, self.on, self.off, self.seconds = fake, on, off, seconds
        self.done = threading.Event()
        self.log: list[tuple[float, bool]] = []
        self.gpus = (0,) if other is not None else (0, 1)
        if other is not None:
            self.fake.device(1).update(other)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _show(self, fields: dict, on: bool) -> None:
        for i in self.gpus:
            self.fake.device(i).update(fields)
        self.log.append((self.fake.write(), on))

    def share_on(self, start: float, end: float) -> float:
        return share_on(self.log, start, end)

    def _run(self) -> None:
        on = True
        while not self.done.wait(self.seconds):
            on = not on
            self._show(self.on if on else self.off, on)

    def __enter__(self) -> Phases:
        self._show(self.on, True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(5)


def tick(
    collector: GpuCollector, every: float, ticks: int, between: Any = None
) -> list[tuple[float, float, GpuPart]]:
    """(start, end, part) of each tick, ``every`` seconds apart on the clock's own schedule."""
    out = []
    with no_collection_pauses():
        start = time.monotonic()
        for n in range(ticks):
            at = time.monotonic()
            part = collector.collect()
            out.append((at, time.monotonic(), part))
            if between is not None:
                between(n, part)
            time.sleep(max(0.0, start + (n + 1) * every - time.monotonic()))
    return out


@pytest.fixture
def fake(tmp_path: Path, fake_nvml_library: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    f = FakeNvml(tmp_path / "nvml.json", gpus=2, averaged=True)
    monkeypatch.setenv("FAKE_NVML_STATE", str(f.path))
    return f


@pytest.mark.serial  # the windows' timing against the phases: alone, not side by side
def test_a_tick_that_works_half_and_spins_half_carries_each_stretch(
    fake: FakeNvml, fake_nvml_library: Path
) -> None:
    """0.8 s ticks (three 0.27 s windows) over 1.1 s phases of hot work and spinning: each tick holds
    windows that worked and windows that spun, tiling it; split window by window the share of work
    is the time the GPU worked, where the tick's mean overstates it; GPU 1, idle, takes none."""
    collector = GpuCollector(library=str(fake_nvml_library))
    try:
        with Phases(fake, HOT, SPIN, 1.1, IDLE) as phases:
            ticks = tick(collector, 0.8, 9)
    finally:
        collector.close()
    windowed = [(at, part) for at, _, part in ticks[2:] if part.gpus[0].activity_windows]
    assert len(windowed) >= 5, [len(p.gpus[0].activity_windows) for _, _, p in ticks]
    assert not any(p.gpus[1].activity_windows for _, _, p in ticks), "an idle GPU read in windows"
    near = far = 0.0
    for (at, part), (next_at, _) in zip(windowed, [*windowed[1:], (None, None)], strict=False):
        g = part.gpus[0]
        spans = [x.seconds for x in g.activity_windows]
        assert len(spans) >= 3 and min(spans) >= MIN_INTERVAL, spans
        # the windows' mean is the tick's figure (GPM's metrics are means over their window)
        assert sum(x.seconds * x.work for x in g.activity_windows) / sum(spans) == pytest.approx(
            g.sm_active, abs=1e-6
        )
        if next_at is None:
            continue
        sample = sample_from_snapshot(NodeSnapshot(1, 0.0, at, parts={"gpu": part})).gpus[0]
        truth = phases.share_on(at - sum(spans), at)
        by_windows = shares(sample, sample.util or 0.0, Baselines(), CFG).working
        by_mean = shares(sample._replace(windows=()), sample.util or 0.0, Baselines(), CFG).working
        near += abs(by_windows - truth)
        far += abs(by_mean - truth)
    n = len(windowed) - 1
    assert near / n < 0.1, (near / n, far / n)
    assert near < far, (near / n, far / n)
    status = summary(windowed[-1][1], GpuRates())
    assert status["gpus"][0]["readings"]["activity"] == "gpm-windows"
    assert f"sm from gpm-windows x{len(windowed[-1][1].gpus[0].activity_windows)}" in lines(status)[1]
    assert status["gpus"][1]["readings"]["activity"] == "gpm"


@pytest.mark.serial
def test_a_gpu_that_hangs_in_a_window_holds_only_itself(fake: FakeNvml, fake_nvml_library: Path) -> None:
    """GPU 1's calls start hanging (1.5 s each) while both are read in windows, the collector run by
    the real sampler: the sampler joins the call stuck in GPU 1, GPU 0 keeps its figures and windows,
    GPU 1 shows unresponsive, no tick waits past its deadline, and once GPU 1 answers again it is
    read in windows again."""
    collector = GpuCollector(library=str(fake_nvml_library), call_timeout=0.3)
    sampler = Sampler([collector], interval=0.8, timeout=5.0, stall_after=60.0)
    ticks: list[tuple[float, float, GpuPart]] = []

    async def run() -> None:
        start = time.monotonic()
        for n in range(10):
            at = time.monotonic()
            part = (await sampler.tick()).part(GpuPart)
            assert part is not None, f"tick {n}: no GPU part"
            ticks.append((at, time.monotonic(), part))
            if n == 2:
                fake.set(1, delay_ms=1500)
            if n == 5:
                fake.set(1, delay_ms=0)
            await asyncio.sleep(max(0.0, start + (n + 1) * 0.8 - time.monotonic()))

    try:
        with Phases(fake, HOT, SPIN, 0.8, None):
            asyncio.run(run())
    finally:
        sampler.close()
    seen = [(p.gpus[0].up, p.gpus[1].up) for _, _, p in ticks]
    assert all(g0 for g0, _ in seen), seen
    assert not all(g1 for _, g1 in seen[3:7]), seen  # GPU 1 hung meanwhile
    assert any(p.gpus[1].unresponsive_seconds for _, _, p in ticks[3:7]), seen
    assert max(end - at for at, end, _ in ticks) < 0.8, [round(e - a, 2) for a, e, _ in ticks]
    assert any(p.gpus[0].activity_windows for _, _, p in ticks[4:7]), "GPU 0 lost its windows"
    assert ticks[-1][2].gpus[1].up and any(p.gpus[1].activity_windows for _, _, p in ticks[-3:])
