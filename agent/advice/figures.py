"""Each job's GPU figures over its run, from the snapshots: the mean tensor and DRAM activity while
its GPUs worked, its GPU memory peak, how many GPUs it had and what NVML calls them. Kept in memory
(a restart starts them again; the ledger's buckets are kept on disk)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agent.sources.gpu.part import GpuStats

WORKING = 0.1  # a GPU sample counts for the activity mix while its SMs are at least this busy


@dataclass(slots=True)
class GpuFigures:
    tensor_sum: float = 0.0
    dram_sum: float = 0.0
    samples: int = 0
    memory_peak_bytes: int | None = None
    gpus: set[str] = field(default_factory=set)
    names: list[str] = field(default_factory=list)

    def add(self, g: GpuStats) -> None:
        if g.uuid not in self.gpus:
            self.gpus.add(g.uuid)
            self.names.append(g.model)
        if g.memory_used_bytes is not None:
            self.memory_peak_bytes = max(self.memory_peak_bytes or 0, g.memory_used_bytes)
        work = g.sm_active if g.sm_active is not None else g.tensor_active
        if work is None or work < WORKING or g.tensor_active is None or g.dram_active is None:
            return
        self.tensor_sum += g.tensor_active
        self.dram_sum += g.dram_active
        self.samples += 1

    @property
    def tensor(self) -> float | None:
        return self.tensor_sum / self.samples if self.samples else None

    @property
    def dram(self) -> float | None:
        return self.dram_sum / self.samples if self.samples else None


def add_snapshot(
    figures: dict[str, GpuFigures], gpus: Sequence[GpuStats], keys: Sequence[str], node_key: str
) -> None:
    """Each GPU's sample to the job on it (``keys``, one per GPU; none: all to ``node_key``)."""
    for i, g in enumerate(gpus):
        if not g.up:
            continue
        key = keys[i] if i < len(keys) else node_key
        figures.setdefault(key, GpuFigures()).add(g)
