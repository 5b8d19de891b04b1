"""Fixtures for the GPU tests (imported by name: a conftest.py here would shadow tests/conftest.py,
which other test modules import as ``conftest``).

The fake libnvidia-ml.so.1 is built once per session with the system compiler, and every test gets
a state file of its own. In-process tests hand the library to pynvml by path ([gpu] library); daemon
tests put it on LD_LIBRARY_PATH, which is how `make run` and production load NVML."""

from __future__ import annotations

import gc
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pynvml
import pytest
from conftest import need_binary

from agent.devtools.fake_nvml import LIBRARY, REPO, FakeNvml
from agent.sources.gpu.binding import load_library
from agent.sources.gpu.nvml import NvmlDriverError


@contextmanager
def no_collection_pauses() -> Iterator[None]:
    """Python's cycle collector holds every thread while it walks the heap, and late in a pytest
    process (the lab's runs before) a full pass can take most of a second: a phase writer and the
    collector's ticks stall together, and one tick holds a stretched phase. Frozen, the heap so far
    is not walked again; what a test makes meanwhile still is."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture(scope="session")
def fake_nvml_library() -> Path:
    need_binary("cc", "build-essential")
    if shutil.which("make") is None:
        pytest.skip("make not found (Debian package make, pulled in by build-essential)")
    done = subprocess.run(["make", "-s", "fakenvml"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, f"building the fake NVML failed:\n{done.stdout}{done.stderr}"
    return LIBRARY


@pytest.fixture
def fake_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_nvml_library: Path) -> Iterator[FakeNvml]:
    """Eight idle H100s in a state file that FAKE_NVML_STATE names for this test."""
    fake = FakeNvml(tmp_path / "nvml-state.json", gpus=8)
    monkeypatch.setenv("FAKE_NVML_STATE", str(fake.path))
    yield fake


@pytest.fixture
def nvml_env(fake_nvml: FakeNvml, fake_nvml_library: Path) -> dict[str, str]:
    """Environment for a daemon subprocess that loads the fake as libnvidia-ml.so.1."""
    return {"LD_LIBRARY_PATH": str(fake_nvml_library.parent), "FAKE_NVML_STATE": str(fake_nvml.path)}


@pytest.fixture
def nvml(fake_nvml: FakeNvml, fake_nvml_library: Path) -> Iterator[FakeNvml]:
    """The fake loaded into this process and NVML initialised: pynvml's calls reach it directly."""
    load_library(str(fake_nvml_library))
    pynvml.nvmlInit()
    yield fake_nvml
    pynvml.nvmlShutdown()


def share_on(log: list[tuple[float, bool]], start: float, end: float) -> float:
    """The share of [start, end] a phase writer's GPUs were on, by its log of (monotonic time, on)
    at each change."""
    total = 0.0
    for (t, on), (t_next, _) in zip(log, [*log[1:], (end, False)], strict=True):
        lo, hi = max(t, start), min(t_next, end)
        if on and hi > lo:
            total += hi - lo
    return total / (end - start)


class Stuck:
    """``collector.collect()`` on a thread of its own, as the sampler's worker calls it, and what it
    ended with (its part, or the exception: ``Superseded`` for a call another joined)."""

    def __init__(self, collector: Any) -> None:
        self.ended: object = None
        self.thread = threading.Thread(target=self._run, args=(collector,), daemon=True)
        self.thread.start()

    def _run(self, collector: Any) -> None:
        try:
            self.ended = collector.collect()
        except BaseException as e:
            self.ended = e


def collected(collector: Any) -> Any:
    """``collector.collect()``, or None while NVML is failing (in its re-init's backoff)."""
    try:
        return collector.collect()
    except NvmlDriverError:
        return None


def value(text: str, name: str, gpu: int | str, **labels: str) -> float | None:
    """The value of the series ``name`` of GPU ``gpu`` (an index, or an address) with ``labels``, in
    the exposition ``text``; None where there is none."""
    for line in text.splitlines():
        if (
            line.startswith(name + "{")
            and f'gpu="{gpu}"' in line
            and all(f'{k}="{v}"' in line for k, v in labels.items())
        ):
            return float(line.rsplit(" ", 1)[1])
    return None


def healthz(agent: Any) -> tuple[int, dict]:
    code, body = agent.get("/healthz")
    return code, json.loads(body)


def scrape_p99(agent: Any, n: int = 40) -> float:
    """The 99th percentile of ``n`` scrapes of /metrics, one after another, in seconds."""
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        agent.metrics()
        took.append(time.perf_counter() - t0)
    return sorted(took)[int(n * 0.99) - 1]
