"""Drive the fake ``libnvidia-ml.so.1`` (``fakenvml/``) from Python.

The fake reads the JSON file named by ``FAKE_NVML_STATE`` whenever it changes; this module builds
such states with realistic defaults and replaces the file atomically, so a reader never sees half of
one. The schema is documented in docs/fake-nvml.md.

    fake = FakeNvml(tmp / "nvml.json", gpus=8)
    fake.update(0, utilization_gpu=95, sm_active=80.0)
    fake.add_xid(3, 79)
    fake.set(5, lost=True)
    env = {"LD_LIBRARY_PATH": str(library_dir()), "FAKE_NVML_STATE": str(fake.path)}
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

from agent.core.statefile import write_atomic
from agent.devtools import REPO

LIBRARY = REPO / "build" / "fakenvml" / "libnvidia-ml.so.1"
# the PCI buses of the eight GPUs on an HGX H100 board
HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
GIB = 1024**3


def device(index: int, **fields: Any) -> dict[str, Any]:
    """One idle H100 SXM5 with every capability present; ``fields`` override any key."""
    bus = HGX_BUSES[index] if index < len(HGX_BUSES) else 0x100 + index
    d: dict[str, Any] = {
        "index": index,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-{index:08x}-fa4e-4e5f-8a1b-{0x2C9E0000 + index:012x}",
        "pci_bus_id": f"00000000:{bus:02X}:00.0",
        "utilization_gpu": 0,
        "utilization_memory": 0,
        "memory_total_bytes": 80 * GIB,
        "memory_used_bytes": 0,
        "power_mw": 70_000,
        "power_limit_mw": 700_000,
        "temperature_c": 32,
        "sm_clock_mhz": 1980,
        "clocks_event_reasons": 0,
        "pcie_tx_bytes": 0,
        "pcie_rx_bytes": 0,
        "nvlink_tx_kib": 0,
        "nvlink_rx_kib": 0,
        "sm_active": 0.0,
        "tensor_active": 0.0,
        "dram_active": 0.0,
        "ecc_uncorrected": 0,
        "row_remap_failure": False,
        "processes": [],
        "xid_events": [],
        "lost": False,
        "unsupported": [],
        "delay_ms": 0,
    }
    d.update(fields)
    return d


def state(gpus: int | list[dict[str, Any]] = 8, **top: Any) -> dict[str, Any]:
    """A whole state: ``gpus`` identical idle devices, or the given device dicts."""
    devices = [device(i) for i in range(gpus)] if isinstance(gpus, int) else gpus
    s: dict[str, Any] = {
        "driver_version": "550.90.07",
        "nvml_version": "12.550.90.07",
        "cuda_driver_version": 12040,
        "missing_functions": [],
        "devices": devices,
    }
    s.update(top)
    return s


def write_state(path: str | Path, data: dict[str, Any]) -> None:
    """Replace the state file in one rename: the fake sees the old state or the new one."""
    write_atomic(path, json.dumps(data, indent=1).encode())


def library_dir(build: bool = True) -> Path:
    """The folder to put on ``LD_LIBRARY_PATH``; builds the library with ``make fakenvml`` if needed."""
    if build and (REPO / "Makefile").exists():
        done = subprocess.run(["make", "-s", "fakenvml"], cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"make fakenvml failed:\n{done.stdout}{done.stderr}")
    if not LIBRARY.exists():
        raise FileNotFoundError(f"{LIBRARY} is missing: run `make fakenvml` in the source tree")
    return LIBRARY.parent


class FakeNvml:
    """A state file and the state it holds; every change is written at once."""

    def __init__(self, path: str | Path, gpus: int | list[dict[str, Any]] = 8, **top: Any) -> None:
        self.path = Path(path)
        self.state = state(gpus, **top)
        self._seq = 0
        self.write()

    def write(self) -> None:
        write_state(self.path, self.state)

    def device(self, index: int) -> dict[str, Any]:
        return self.state["devices"][index]

    def set(self, index: int, **fields: Any) -> None:
        """Change fields of one GPU (``lost=True``, ``unsupported=[...]``, ``delay_ms=...``)."""
        self.device(index).update(copy.deepcopy(fields))
        self.write()

    update = set

    def set_top(self, **fields: Any) -> None:
        """Change top-level keys (``missing_functions``, ``driver_error``, ``driver_version``)."""
        self.state.update(copy.deepcopy(fields))
        self.write()

    def add_xid(self, index: int, xid: int) -> int:
        """Queue one Xid critical error on a GPU; returns its seq (delivered once)."""
        self._seq = max([self._seq, *(e["seq"] for d in self.state["devices"] for e in d["xid_events"])]) + 1
        self.device(index)["xid_events"].append({"seq": self._seq, "xid": xid})
        self.write()
        return self._seq

    def advance(
        self,
        index: int,
        seconds: float,
        pcie_rx: float = 0,
        pcie_tx: float = 0,
        nvlink_rx: float = 0,
        nvlink_tx: float = 0,
    ) -> None:
        """Move a GPU's cumulative counters on as if it moved these bytes per second for ``seconds``."""
        d = self.device(index)
        d["pcie_rx_bytes"] += int(pcie_rx * seconds)
        d["pcie_tx_bytes"] += int(pcie_tx * seconds)
        d["nvlink_rx_kib"] += int(nvlink_rx * seconds / 1024)
        d["nvlink_tx_kib"] += int(nvlink_tx * seconds / 1024)
        self.write()
