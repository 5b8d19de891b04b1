"""A node without GPUs never imports nvidia-ml-py: the daemon's GPU collector looks for the library
first (agent/sources/gpu/probe.py), and the clocks event reasons the classifier and GPU health read
are nvml.h's bits written out, which must stay the ones nvidia-ml-py names."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest
from conftest import REPO
from gpu_fixtures import fake_nvml, fake_nvml_library  # noqa: F401

from agent.devtools.fake_nvml import FakeNvml
from agent.sources import SourceAbsent
from agent.sources.gpu import probe as probing
from agent.sources.gpu.probe import NvmlProbe
from agent.sources.gpu.reasons import ClockReason

WITHOUT_LIBRARY = """
import sys
from agent.sources import SourceAbsent
from agent.sources.registry import BuildContext
from agent.classifier import component
from agent.faults import gpu
from agent.sources.gpu import probe as probing
from agent.sources.gpu.probe import NvmlProbe
probing.LOOK_SECONDS = 0.0
probe = NvmlProbe(sys.argv[1], 1.0, True, 2.0)
for _ in range(3):
    try:
        probe.collect()
    except SourceAbsent as e:
        print(e)
print("pynvml" in sys.modules)
"""


def test_each_reason_is_nvml_s_bit():
    for reason in ClockReason:
        camel = "".join(word.capitalize() for word in (reason.name or "").split("_"))
        assert getattr(pynvml, f"nvmlClocksEventReason{camel}") == reason.value, reason


def test_every_nvml_reason_is_here():
    """A bit NVML adds would be a reason the agent never shows: it must be added to ClockReason."""
    every = 0
    for reason in ClockReason:
        every |= reason.value
    assert every == pynvml.nvmlClocksEventReasonAll


def test_no_library_no_binding(tmp_path: Path):
    missing = tmp_path / "libnvidia-ml.so.1"
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_LIBRARY, str(missing)], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4 and all(ln.startswith(f"no NVML library: {missing}") for ln in lines[:3]), lines
    assert lines[3] == "False"  # asked three times, and nvidia-ml-py never imported


def test_a_library_installed_later_is_looked_for_every_look_seconds(
    tmp_path: Path, fake_nvml: FakeNvml, fake_nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed dlopen searches the loader's paths: a node without GPUs looks once every
    LOOK_SECONDS, not every tick, and finds a driver installed meanwhile at the next look."""
    later = tmp_path / "libnvidia-ml.so.1"
    probe = NvmlProbe(str(later), 1.0, False, 2.0)
    looks: list[str] = []
    real_cdll = ctypes.CDLL

    def cdll(name: str, *args: object, **kw: object) -> ctypes.CDLL:
        looks.append(name)
        return real_cdll(name, *args, **kw)

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    try:
        for _ in range(3):
            with pytest.raises(SourceAbsent, match="no NVML library"):
                probe.collect()
        assert looks == [str(later)]  # one look, the reason kept
        shutil.copy(fake_nvml_library, later)
        with pytest.raises(SourceAbsent):
            probe.collect()  # not looked for again yet
        later_clock = time.monotonic() + probing.LOOK_SECONDS + 1
        monkeypatch.setattr(probing, "time", SimpleNamespace(monotonic=lambda: later_clock))
        assert len(probe.collect().gpus) == 8  # the next look finds it
        assert looks[-1] == str(later)
    finally:
        probe.close()


def test_once_the_library_opens_the_collector_reads(fake_nvml: FakeNvml, fake_nvml_library: Path):
    probe = NvmlProbe(str(fake_nvml_library), 1.0, False, 2.0)
    try:
        part = probe.collect()
        assert len(part.gpus) == 8 and part.gpus[0].up
        fake_nvml.set(3, utilization_gpu=77)
        assert probe.collect().gpus[3].utilization == 0.77
    finally:
        probe.close()
