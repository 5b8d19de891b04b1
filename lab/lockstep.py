"""A synchronous job on the node's eight fake GPUs, one of them possibly slow: the ranks
(lab/lockstepjob.py under torchrun) write their phases, and a painter thread shows each rank's phase on
its GPU, with the slow GPU's evidence (its clocks event reasons and lower SM clock) from when it
turns slow.

A :class:`Draw` is what a seed decides: which GPU turns slow, under which reason, how much slower,
and the step's length. The tests tune on some seeds and report on others.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.gpu import LabGpus

JOB = Path(__file__).with_name("lockstepjob.py")
GPUS = 8
PAINT_EVERY = 0.005  # seconds between looks at the ranks' phase files
SM_CLOCK_MAX_MHZ = 1980  # an H100 SXM5's
# the clocks event reasons of a GPU that runs slow (NVML's bits; the driver sets hw_slowdown with
# each of its hardware causes), and the words the agent names each by
CAUSES = {
    "hw_slowdown": (0x8, "hardware slowdown"),
    "hw_thermal_slowdown": (0x8 | 0x40, "thermal throttling (hardware)"),
    "hw_power_brake_slowdown": (0x8 | 0x80, "power brake"),
    "sw_thermal_slowdown": (0x20, "thermal throttling (software)"),
    "sw_power_cap": (0x4, "at its power cap"),
}


def slow_fields(cause: str, factor: float) -> dict[str, Any]:
    """What a GPU that runs ``factor`` times slow under ``cause`` shows: the clocks event reasons and
    the SM clock they leave it."""
    return {"clocks_event_reasons": CAUSES[cause][0], "sm_clock_mhz": round(SM_CLOCK_MAX_MHZ / factor)}


@dataclass(frozen=True)
class Draw:
    seed: int
    slow: int  # the GPU that turns slow
    cause: str
    factor: float  # how much longer its compute takes
    gpu_seconds: float  # a healthy step's compute

    @classmethod
    def of(cls, seed: int) -> Draw:
        rng = random.Random(seed)
        slow = rng.randrange(GPUS)
        cause = rng.choice(sorted(CAUSES))
        factor = rng.uniform(1.3, 1.9)
        gpu_seconds = rng.uniform(0.04, 0.12)
        return cls(seed, slow, cause, factor, gpu_seconds)

    def extra(self) -> dict[int, dict[str, Any]]:
        return {self.slow: slow_fields(self.cause, self.factor)}

    @property
    def words(self) -> str:
        return CAUSES[self.cause][1]


class Painter:
    def __init__(self, gpus: LabGpus, phases: Path, extra: dict[int, dict[str, Any]]) -> None:
        self._gpus, self._dir, self._extra = gpus, phases, extra
        self._stop = threading.Event()
        self.first_step: float | None = None  # monotonic time a rank first computed
        self.slow_since: float | None = None  # monotonic time the slow rank first said it was slow
        self._thread = threading.Thread(target=self._run, name="lab-painter", daemon=True)

    def start(self) -> Painter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _read(self) -> tuple[list[str], list[int | None], frozenset[int]]:
        phases: list[str] = ["idle"] * GPUS
        pids: list[int | None] = [None] * GPUS
        slow: set[int] = set()
        for rank in range(GPUS):
            with contextlib.suppress(OSError, ValueError):
                phase, pid, *flags = (self._dir / str(rank)).read_text().split()
                phases[rank], pids[rank] = phase, int(pid)
                if "slow" in flags:
                    slow.add(rank)
        return phases, pids, frozenset(slow)

    def _run(self) -> None:
        shown = None
        while not self._stop.wait(PAINT_EVERY):
            phases, pids, slow = self._read()
            if (phases, pids, slow) == shown:
                continue
            now = time.monotonic()
            if self.first_step is None and "compute" in phases:
                self.first_step = now
            if self.slow_since is None and slow:
                self.slow_since = now
            # the slow GPU's evidence (clocks event reasons, a lower clock) shows from when it is slow
            self._gpus.paint(phases, pids, {k: v for k, v in self._extra.items() if k in slow})
            shown = (phases, pids, slow)


@contextlib.contextmanager
def lockstep_job(
    draw: Draw, state: Path, workdir: Path, seconds: float, slow_after: float = 0.0
) -> Iterator[Painter]:
    """The job running on the fake GPUs at ``state`` (eight H100s, GPM on all), its slow GPU (if the
    draw has one) slow from ``slow_after`` seconds in; yields the painter."""
    phases = workdir / "phases"
    phases.mkdir(parents=True, exist_ok=True)
    gpus = LabGpus(state, gpus=GPUS, gpm="all")
    painter = Painter(gpus, phases, draw.extra()).start()
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    args = [
        *("--phases", str(phases), "--seconds", f"{seconds:g}", "--gpu-seconds", f"{draw.gpu_seconds:.4f}"),
        *("--slow-rank", str(draw.slow), "--slow-factor", f"{draw.factor:.3f}"),
        *("--slow-after", f"{slow_after:g}"),
        *("--seed", str(draw.seed)),
    ]
    log = open(workdir / "torchrun.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [torchrun, "--standalone", "--nproc-per-node", str(GPUS), str(JOB), *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        yield painter
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        painter.stop()
