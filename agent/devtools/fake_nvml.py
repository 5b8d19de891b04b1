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
import time
from pathlib import Path
from typing import Any, NamedTuple

from agent.core.statefile import write_atomic
from agent.devtools import REPO

LIBRARY = REPO / "build" / "fakenvml" / "libnvidia-ml.so.1"
# the PCI buses of the eight GPUs on an HGX H100 board
HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
GIB = 1024**3


# The name (which picks the fake's per-product defaults: docs/fake-nvml.md, "Products"), memory, power
# limit (also the default limit the GPU boots with), idle power, whether the product has GPM (Hopper and
# later), its NVLink links (0: a PCIe card without NVLink), PCIe generation and max SM clock, per
# product. The last four are the fake's profile in fakenvml/state.c too: keep the two in step.
class Product(NamedTuple):
    name: str
    memory_gib: int
    limit_w: int
    idle_w: int
    gpm: bool  # Hopper and later
    nvlinks: int
    pcie_generation: int
    sm_clock_max_mhz: int

    @property
    def nvlink(self) -> bool:
        return self.nvlinks > 0


PRODUCTS: dict[str, Product] = {
    "H100": Product("NVIDIA H100 80GB HBM3", 80, 700, 70, True, 18, 5, 1980),
    "H200": Product("NVIDIA H200", 141, 700, 75, True, 18, 5, 1980),
    "H20": Product("NVIDIA H20", 96, 500, 60, True, 18, 5, 1980),
    "A100": Product("NVIDIA A100-SXM4-80GB", 80, 400, 55, False, 12, 4, 1410),
    "A10": Product("NVIDIA A10", 24, 150, 20, False, 0, 4, 1695),
    "L20": Product("NVIDIA L20", 48, 350, 30, False, 0, 4, 2520),
    "T4": Product("Tesla T4", 16, 70, 10, False, 0, 3, 1590),
}
# readings the fake averages when the state carries their running integrals
AVERAGED = ("utilization_gpu", "utilization_memory", "power_mw", "sm_active", "tensor_active", "dram_active")
# NVLink's error counters, each the total over the links (null: not supported, as without NVLink)
NVLINK_ERRORS = (
    "nvlink_crc_flit_errors",
    "nvlink_crc_data_errors",
    "nvlink_replay_errors",
    "nvlink_recovery_errors",
)
# the clocks event reasons the fake counts the time of (the ``clocks_event_seconds`` keys), by bit
CLOCK_EVENTS = {
    "sw_power_cap": 0x4,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}
HISTORY_SECONDS = 3.0  # integrals kept: more than a 1 s power mean or a GPM interval needs
MAX_INTEGRALS = 60  # the fake takes 64


def device(index: int, product: str = "H100", **fields: Any) -> dict[str, Any]:
    """One idle GPU of ``product`` (a key of PRODUCTS: an H100 SXM5 by default) with every capability
    it has present (GPM keys are null before Hopper); ``fields`` override any key."""
    spec = PRODUCTS[product]
    bus = HGX_BUSES[index] if index < len(HGX_BUSES) else 0x100 + index
    gpm = 0.0 if spec.gpm else None
    d: dict[str, Any] = {
        "index": index,
        "name": spec.name,
        "uuid": f"GPU-{index:08x}-fa4e-4e5f-8a1b-{0x2C9E0000 + index:012x}",
        "pci_bus_id": f"00000000:{bus:02X}:00.0",
        "utilization_gpu": 0,
        "utilization_memory": 0,
        "memory_total_bytes": spec.memory_gib * GIB,
        "memory_used_bytes": 0,
        "power_mw": spec.idle_w * 1000,
        "power_limit_mw": spec.limit_w * 1000,
        "temperature_c": 32,
        "sm_clock_mhz": min(1980, spec.sm_clock_max_mhz),
        "sm_clock_max_mhz": spec.sm_clock_max_mhz,
        "power_default_limit_mw": spec.limit_w * 1000,
        "pcie_link_generation": spec.pcie_generation,
        "pcie_link_generation_max": spec.pcie_generation,
        "pcie_link_width": 16,
        "pcie_link_width_max": 16,
        "nvlink_links": spec.nvlinks or None,
        "nvlink_inactive": [],
        "clocks_event_reasons": 0,
        "clocks_event_counters": spec.gpm,  # Hopper and later count the time under each reason
        "pcie_tx_bytes": 0,
        "pcie_rx_bytes": 0,
        "nvlink_tx_kib": 0 if spec.nvlink else None,
        "nvlink_rx_kib": 0 if spec.nvlink else None,
        "sm_active": gpm,
        "tensor_active": gpm,
        "dram_active": gpm,
        "ecc_uncorrected": 0,
        "ecc_corrected": 0,
        **dict.fromkeys(NVLINK_ERRORS, 0 if spec.nvlink else None),
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
    """A state file and the state it holds; every change is written at once.

    With ``averaged``, each write carries the running integrals of the readings a real GPU averages
    (docs/fake-nvml.md), so utilization, power, GPM and the sample buffer answer as a real GPU's do:
    a change shows in full only once a whole averaging period has passed. Without, the fake answers
    the instant's values: most unit tests set a value and read it back at once (made the default,
    it failed 8 tests in tests/gpu alone, each reading a mix of the old and new value)."""

    def __init__(
        self, path: str | Path, gpus: int | list[dict[str, Any]] = 8, averaged: bool = False, **top: Any
    ) -> None:
        self.path = Path(path)
        self.state = state(gpus, **top)
        self.averaged = averaged
        self._seq = 0
        self._history: dict[int, list[dict[str, float]]] = {}
        self._held: dict[int, dict[str, float]] = {}  # each reading since the last item
        self._own: set[int] = set()  # devices whose integrals the caller writes
        self._held_bits: dict[int, tuple[int, float]] = {}  # each device's reason bits since when
        self.write()

    def write(self) -> float:
        """Replace the state file; return the monotonic time from which the fake answers the new
        values. Averaged, that is the integrals' newest item, taken before the write: a writer's log
        of its changes takes this, not its own clock after the write, which a thread stalled in
        between reads late (the GPUs read 0.43 computing for a logged 0.90: a clean clone)."""
        now = time.monotonic()
        for i, d in enumerate(self.state["devices"]):
            self._count_clock_events(i, d, now)
        if self.averaged:
            now = time.monotonic()
            for i, d in enumerate(self.state["devices"]):
                if i not in self._own:
                    d["integrals"] = self._integrals(i, d, now)
            # a writer of averaged readings changes phases several times a second: no fsync, whose
            # latency on a busy disk would stretch the phase before the change (lab.gpu does the same)
            write_atomic(self.path, json.dumps(self.state).encode(), durable=False)
            return now
        write_state(self.path, self.state)
        return time.monotonic()  # unaveraged, the values change when the file is replaced

    def _count_clock_events(self, i: int, d: dict[str, Any], now: float) -> None:
        """The time each reason's bit held up to ``now``, carried in the state: the fake counts on
        from it, so a state replaced before anyone read it counts too (docs/fake-nvml.md)."""
        seconds = d.setdefault("clocks_event_seconds", dict.fromkeys(CLOCK_EVENTS, 0.0))
        bits, since = self._held_bits.get(i, (0, now))
        for reason, bit in CLOCK_EVENTS.items():
            if bits & bit:
                seconds[reason] = seconds.get(reason, 0.0) + now - since
        d["clocks_event_at"] = now
        self._held_bits[i] = (int(d.get("clocks_event_reasons") or 0), now)

    def _integrals(self, i: int, d: dict[str, Any], now: float) -> list[dict[str, float]]:
        """The history with an item for ``now``: each reading integrated at the value it held."""
        keys = [k for k in AVERAGED if isinstance(d.get(k), int | float) and not isinstance(d.get(k), bool)]
        history, held = self._history.setdefault(i, []), self._held.get(i, {})
        if history and set(history[-1]) - {"at"} != set(keys):
            history.clear()  # a reading became null or came back: start over
        if history:
            prev = history[-1]
            now = max(now, prev["at"] + 1e-6)  # ``at`` increases strictly
            history.append({"at": now, **{k: prev[k] + held[k] * (now - prev["at"]) for k in keys}})
        else:
            history.append({"at": now, **dict.fromkeys(keys, 0.0)})
        while len(history) > 2 and history[1]["at"] < now - HISTORY_SECONDS:
            history.pop(0)
        del history[:-MAX_INTEGRALS]
        self._held[i] = {k: float(d[k]) for k in keys}
        return [dict(item) for item in history]

    def device(self, index: int) -> dict[str, Any]:
        return self.state["devices"][index]

    def set(self, index: int, **fields: Any) -> None:
        """Change fields of one GPU (``lost=True``, ``unsupported=[...]``, ``delay_ms=...``); given
        ``integrals``, the caller keeps that GPU's from then on."""
        if "integrals" in fields:
            self._own.add(index)
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
