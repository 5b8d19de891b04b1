"""A node without GPUs never imports nvidia-ml-py: the daemon's GPU collector looks for the library
first (agent/sources/gpu/probe.py), and the clocks event reasons the classifier and GPU health read
are nvml.h's bits written out, which must stay the ones nvidia-ml-py names."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pynvml
from conftest import REPO
from gpu_fixtures import fake_nvml, fake_nvml_library  # noqa: F401

from agent.devtools.fake_nvml import FakeNvml
from agent.sources.gpu.probe import NvmlProbe
from agent.sources.gpu.reasons import ClockReason

WITHOUT_LIBRARY = """
import sys
from agent.sources import SourceAbsent
from agent.sources.registry import BuildContext
from agent.classifier import component
from agent.faults import gpu
from agent.sources.gpu.probe import NvmlProbe
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


def test_once_the_library_opens_the_collector_reads(fake_nvml: FakeNvml, fake_nvml_library: Path):
    probe = NvmlProbe(str(fake_nvml_library), 1.0, False, 2.0)
    try:
        part = probe.collect()
        assert len(part.gpus) == 8 and part.gpus[0].up
        fake_nvml.set(3, utilization_gpu=77)
        assert probe.collect().gpus[3].utilization == 0.77
    finally:
        probe.close()
