"""host/launch: the GPUs run small kernels with little real work and there is no collective to wait
in, so the host is not launching them fast enough (HTA's kernel wait; the TF profiler's
kernel-launch-bound; DCGM's "graphics active, SM low")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.classifier.shapes.shape import Shape, declare
from agent.core.vocabulary import Bucket, HostSubReason, VerdictReason

PEGGED = 0.6  # a process this busy (of a core, ran or waited to run) launches as fast as it can

if TYPE_CHECKING:
    from agent.classifier.features import Features
    from agent.config.classifier import ClassifierSection


def pressure(f: Features, cfg: ClassifierSection) -> float:
    # a spin needs a peer: one process launched with no rank count cannot be waiting in a collective,
    # so its GPUs are busy with kernels too small to fill them, launched as fast as the host can (a
    # lab job beside a busy core, its host 75% pegged, read "mixed" while this scaled by the pegging)
    return 1.0 if f.host.collective is False else 0.0


def reasons(f: Features) -> list[str]:
    util = f"{(f.spin_util or 0) * 100:.0f}%"
    work = f"{(f.spin_work or 0) * 100:.0f}%"
    world = f.host.world_size
    lines = [
        f"GPUs busy with little real work {f.spin_share * 100:.0f}% of the time: utilization {util} "
        f"with {work} real work (small kernels)",
        f"no collective to wait in: {f.host.ranks or 1} training process ({f.trainer_label}), "
        + ("launched with no rank count (WORLD_SIZE unset)" if world in (None, 1) else f"WORLD_SIZE {world}"),
    ]
    busy = f.cpu_busiest or 0.0
    if busy >= PEGGED:
        lines.append(
            f"its busiest process busy {busy * 100:.0f}% of a core: the host launches as fast as it can"
        )
    else:
        lines.append(
            f"its busiest process busy {busy * 100:.0f}% of a core: kernels too small to fill the GPUs"
        )
    return lines


def hint(f: Features) -> str:
    return (
        "The host cannot keep the GPUs fed with kernels (launch-bound): capture the step in CUDA graphs "
        '(torch.compile(mode="reduce-overhead") or torch.cuda.graphs), fuse small ops with torch.compile, '
        "raise the per-GPU batch so each kernel does more work, and keep per-step host syncs (.item(), "
        "printing tensors, Python loops over tensors) out of the step."
    )


SHAPE = declare(
    Shape(
        sub_reason=HostSubReason.LAUNCH,
        cause=VerdictReason.LAUNCH,
        bucket=Bucket.HOST_LAUNCH,
        explains="spinning",
        pressure=pressure,
        reasons=reasons,
        hint=hint,
        remedy=(
            "Kernel launches hold the GPUs: CUDA graphs or torch.compile, fused ops, larger per-GPU batches."
        ),
        what="busy GPUs with little real work and no collective: the host launches kernels too slowly",
    )
)
