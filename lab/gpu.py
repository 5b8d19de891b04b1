"""The fake GPUs' state for each phase of the synthetic trainer (schema: docs/fake-nvml.md).

Two GPUs: GPU 0 has GPM (SM and tensor activity), GPU 1 has none, so the classifier must judge it by
power, as on Ampere and older. The phases:

- ``compute``: busy, high power, high SM activity;
- ``starved``: waiting for data or writing a checkpoint: idle;
- ``spin``: waiting in a collective: utilization ~100% at low power and low SM activity, as NCCL;
- ``idle``: no job at all (no compute process on the GPUs).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from agent.core.statefile import write_atomic
from agent.devtools.fake_nvml import GIB, device, state

PHASES: dict[str, dict[str, Any]] = {
    "compute": {
        "utilization_gpu": 97,
        "utilization_memory": 58,
        "power_mw": 560_000,
        "sm_active": 82.0,
        "tensor_active": 61.0,
    },
    "starved": {
        "utilization_gpu": 0,
        "utilization_memory": 0,
        "power_mw": 78_000,
        "sm_active": 0.0,
        "tensor_active": 0.0,
    },
    "spin": {
        "utilization_gpu": 100,
        "utilization_memory": 1,
        "power_mw": 115_000,
        "sm_active": 3.0,
        "tensor_active": 0.0,
    },
}
PHASES["idle"] = dict(PHASES["starved"], power_mw=72_000)
GPM_KEYS = ("sm_active", "tensor_active", "dram_active")


def default_state_path(workdir: Path) -> Path:
    """On tmpfs when there is one: the state changes several times a second and must not become
    disk I/O that the agent would see."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else workdir
    return base / f"tna-lab-nvml-{os.getpid()}.json"


class LabGpus:
    def __init__(self, path: Path, gpus: int = 2) -> None:
        self.path = path
        self.gpus = gpus
        self.current: str | None = None
        self.phase("idle")

    def devices(self, phase: str, pid: int | None) -> list[dict[str, Any]]:
        out = []
        for i in range(self.gpus):
            fields = dict(PHASES[phase])
            if i % 2 == 1:  # no GPM on the odd GPUs: null = not supported
                fields.update(dict.fromkeys(GPM_KEYS))
            procs = [{"pid": pid, "used_memory_bytes": 30 * GIB}] if pid else []
            out.append(device(i, memory_used_bytes=(30 * GIB if pid else 0), processes=procs, **fields))
        return out

    def phase(self, phase: str, pid: int | None = None) -> None:
        """Show ``phase``; ``pid`` is the compute process on every GPU (None: no job)."""
        # no fsync (unlike fake_nvml.write_state): the file changes at every phase of a workload
        # whose I/O the agent is measuring, and must not become disk I/O of its own
        write_atomic(self.path, json.dumps(state(self.devices(phase, pid))).encode(), durable=False)
        self.current = phase


class PhaseLog:
    """JSON lines of what the trainer does, with wall-clock times: the lab's ground truth."""

    def __init__(self, path: Path) -> None:
        self._f = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the trainer

    def write(self, **fields: Any) -> None:
        self._f.write(json.dumps({"wall": time.time(), **fields}) + "\n")

    def close(self) -> None:
        self._f.close()
