"""The fake GPUs' state for each phase of the synthetic trainer (schema: docs/fake-nvml.md).

Two GPUs: GPU 0 has GPM (SM and tensor activity), GPU 1 has none, so the classifier must judge it by
power, as on Ampere and older. The phases:

- ``compute``: busy, high power, high SM activity;
- ``starved``: waiting for data or writing a checkpoint: idle;
- ``spin``: waiting in a collective: utilization ~100% at low power and low SM activity, as NCCL;
- ``small``: small kernels one after another from a host that cannot launch them faster: a kernel
  resident most of the time, little work in each (utilization ~70%, SM activity ~8%);
- ``idle``: no job at all (no compute process on the GPUs).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent.core.statefile import write_atomic
from agent.devtools.fake_nvml import GIB, PRODUCTS, device, state

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
PHASES["small"] = {
    "utilization_gpu": 72,
    "utilization_memory": 6,
    "power_mw": 160_000,
    "sm_active": 8.0,
    "tensor_active": 1.0,
}
PHASES["idle"] = dict(PHASES["starved"], power_mw=72_000)
GPM_KEYS = ("sm_active", "tensor_active", "dram_active")


def default_state_path(workdir: Path, tag: str) -> Path:
    """On tmpfs when there is one: the state changes several times a second and must not become
    disk I/O that the agent would see. ``tag`` tells the labs of one process apart."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else workdir
    return base / f"tna-lab-nvml-{tag}.json"


AVERAGED = ("utilization_gpu", "utilization_memory", "power_mw", *GPM_KEYS)
HISTORY_SECONDS = 3.0  # integrals kept in the file: more than a 1 s average or GPM interval needs
# each GPU's readings where the sources leave them open (lab.draws.gpu_readings), as JSON: every
# writer of one lab run (the harness, the trainers it starts) shows the same GPUs
READINGS_ENV = "TNA_LAB_GPU_READINGS"
# the fields a GPU shows while it computes, over PHASES["compute"], as JSON (a drawn tensor:DRAM mix
# for the advice's lab, lab.advicedraws): the other phases keep theirs
WORK_ENV = "TNA_LAB_GPU_WORK"


def readings_from_env() -> tuple[dict[str, Any], ...]:
    """The run's drawn readings (none: the products' defaults, docs/fake-nvml.md)."""
    text = os.environ.get(READINGS_ENV)
    if not text:
        return ()
    found = json.loads(text)
    if not isinstance(found, list) or not all(isinstance(r, dict) for r in found):
        raise ValueError(f"{READINGS_ENV} must be a JSON list of objects, one per GPU: {text!r}")
    return tuple(found)


def work_from_env() -> dict[str, Any]:
    """The run's fields for the compute phase (none: PHASES["compute"] as it is)."""
    text = os.environ.get(WORK_ENV)
    if not text:
        return {}
    found = json.loads(text)
    if not isinstance(found, dict):
        raise ValueError(f"{WORK_ENV} must be a JSON object of the fake's state keys: {text!r}")
    return found


class LabGpus:
    """``averaged``: the state carries running integrals (docs/fake-nvml.md), so the fake answers as
    a real GPU does: utilization over the past sample period, power over 1 s on the GPM GPUs (H100)
    and the instant's on the others (GA100), GPM between two samples. A writer taking over a file
    (the trainer after the lab's idle) carries on the integrals found there."""

    def __init__(
        self,
        path: Path,
        gpus: int = 2,
        averaged: bool | None = None,
        gpm: str = "even",
        readings: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        self.path = path
        self.gpus = gpus
        # GPU i keeps its readings as readings[i % len] (utilization period, buffer depth and clock)
        self.readings = tuple(readings) if readings is not None else readings_from_env()
        self.work = work_from_env()  # over the compute phase's fields
        self.gpm = gpm  # "even": GPM on the even GPUs only (an H100 beside a GA100); "all": an HGX board
        # averaged, as every real GPU reports, unless TNA_LAB_GPUS_AVERAGED=0 (every writer of a lab
        # run: the trainers inherit it), for the instant-mode figures beside the averaged ones
        self.averaged = os.environ.get("TNA_LAB_GPUS_AVERAGED") != "0" if averaged is None else averaged
        self.current: str | None = None
        self._pid: int | None = None
        self.pcie_rx = 0  # bytes each GPU has received over PCIe (NVML's counter), cumulative
        self._history: list[list[dict[str, float]]] = [[] for _ in range(gpus)]
        self._last: list[dict[str, float]] = [{} for _ in range(gpus)]
        if self.averaged:
            self._carry_on()
        self.phase("idle")

    def _carry_on(self) -> None:
        try:
            found = json.loads(self.path.read_text())["devices"]
        except (OSError, ValueError, KeyError, TypeError):
            return
        for i, dev in enumerate(found[: self.gpus]):
            items = dev.get("integrals") if isinstance(dev, dict) else None
            if isinstance(items, list) and items:
                self._history[i] = items
                self._last[i] = {k: dev[k] for k in AVERAGED if isinstance(dev.get(k), int | float)}

    def _integrals(self, i: int, fields: dict[str, Any], now: float) -> dict[str, Any]:
        history, last = self._history[i], self._last[i]
        keys = [k for k in AVERAGED if fields.get(k) is not None]
        if history and set(history[-1]) - {"at"} != set(keys):
            history.clear()  # another device shape: start over
        if history:
            prev = history[-1]
            total = {k: prev[k] + last.get(k, 0.0) * max(0.0, now - prev["at"]) for k in keys}
        else:
            total = dict.fromkeys(keys, 0.0)
        history.append({"at": now, **total})
        while len(history) > 2 and history[1]["at"] < now - HISTORY_SECONDS:
            history.pop(0)
        del history[:-60]  # the fake takes 64
        self._last[i] = {k: float(fields[k]) for k in keys}
        return {"integrals": list(history), "power_average_seconds": 1.0 if i % 2 == 0 else 0.0}

    def devices(
        self,
        phases: Sequence[str],
        pids: Sequence[int | None],
        extra: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """Each GPU in its own phase, with its own compute process; ``extra`` overrides a GPU's
        fields (a throttled GPU's clock and clocks event reasons)."""
        out = []
        now = time.monotonic()
        for i in range(self.gpus):
            fields = dict(PHASES[phases[i]], pcie_rx_bytes=self.pcie_rx)
            if phases[i] == "compute":
                fields.update(self.work)
            else:  # every phase carries the work's keys: the averaged readings' integrals keep one shape
                fields.update((k, fields.get(k, 0.0)) for k in self.work)
            reading = self.readings[i % len(self.readings)] if self.readings else {}
            product = reading.get("product")  # a node of one product: its GPUs all have GPM or none
            if (i % 2 == 1 and self.gpm == "even") if product is None else not PRODUCTS[product].gpm:
                fields.update(dict.fromkeys(GPM_KEYS))  # no GPM: null = not supported
            fields.update(reading)
            fields.update((extra or {}).get(i, {}))
            if self.averaged:
                fields.update(self._integrals(i, fields, now))
            pid = pids[i]
            procs = [{"pid": pid, "used_memory_bytes": 30 * GIB}] if pid else []
            out.append(device(i, memory_used_bytes=(30 * GIB if pid else 0), processes=procs, **fields))
        return out

    def paint(
        self,
        phases: Sequence[str],
        pids: Sequence[int | None],
        extra: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> None:
        """Show each GPU in its own phase (the ranks of a job, one per GPU)."""
        devices = self.devices(phases, pids, extra)
        write_atomic(self.path, json.dumps(state(devices)).encode(), durable=False)

    def phase(
        self, phase: str, pid: int | None = None, extra: Mapping[int, Mapping[str, Any]] | None = None
    ) -> None:
        """Show ``phase``; ``pid`` is the compute process on every GPU (None: no job)."""
        # no fsync (unlike fake_nvml.write_state): the file changes at every phase of a workload
        # whose I/O the agent is measuring, and must not become disk I/O of its own
        devices = self.devices([phase] * self.gpus, [pid] * self.gpus, extra)
        write_atomic(self.path, json.dumps(state(devices)).encode(), durable=False)
        self.current, self._pid = phase, pid

    def received(self, nbytes: int) -> None:
        """Each GPU received ``nbytes`` more over PCIe (a host-to-device copy): the counter NVML's
        field values report, shown in the phase the GPUs are in."""
        self.pcie_rx += nbytes
        if self.current is not None:
            self.phase(self.current, self._pid)


class PhaseLog:
    """JSON lines of what the trainer does, with wall-clock times: the lab's ground truth."""

    def __init__(self, path: Path) -> None:
        self._f = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the trainer

    def write(self, **fields: Any) -> None:
        self._f.write(json.dumps({"wall": time.time(), **fields}) + "\n")

    def close(self) -> None:
        self._f.close()
