"""host/pageable-copy: the GPUs starve while host-to-device copies run over PCIe and no input is
read: memory that is not pinned is staged by the driver through a pinned buffer, synchronously, so
the copy holds the GPUs for as long as the CPU copies (Nsight's rule on pageable copies)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.classifier.ramp import ramp
from agent.classifier.shapes.shape import Shape, declare
from agent.core.vocabulary import Bucket, HostSubReason, VerdictReason

if TYPE_CHECKING:
    from agent.classifier.features import Features
    from agent.config.classifier import ClassifierSection


def pressure(f: Features, cfg: ClassifierSection) -> float:
    # input read from disk, NFS or a stream explains the starvation first: its copies come with it
    fed = max(f.storage_pressure, f.input_pressure)
    return ramp(f.host.pcie_starved, cfg.pageable_copy_rx) * (1.0 - fed)


def _rate(v: float | None) -> str:
    return "-" if v is None else (f"{v / 1e9:.2f} GB/s" if v >= 1e9 else f"{v / 1e6:.0f} MB/s")


def reasons(f: Features) -> list[str]:
    h = f.host
    lines = [
        f"the GPUs received {_rate(h.pcie_starved)} each over PCIe while they starved "
        f"({_rate(h.pcie_working)} while they worked): host-to-device copies hold them",
        f"no input read meanwhile: the training processes read {_rate(f.trainer_read or 0.0)}",
    ]
    if f.cpu_busiest is not None:
        lines.append(f"{f.trainer_label} busy {f.cpu_busiest * 100:.0f}% of a core (copying)")
    return lines


def hint(f: Features) -> str:
    return (
        "The GPUs wait for host-to-device copies from pageable memory: pin the memory (DataLoader "
        "pin_memory=True, tensor.pin_memory() for buffers you keep) and copy with .to(device, "
        "non_blocking=True) so copies overlap compute; keep tensors you reuse every step on the GPU."
    )


SHAPE = declare(
    Shape(
        sub_reason=HostSubReason.PAGEABLE_COPY,
        cause=VerdictReason.PAGEABLE_COPY,
        bucket=Bucket.HOST_COPY,
        explains="starved",
        pressure=pressure,
        reasons=reasons,
        hint=hint,
        remedy="Pageable copies hold the GPUs: pin_memory=True and .to(device, non_blocking=True).",
        what="the GPUs idle while host-to-device copies from pageable memory run, no input read",
    )
)
