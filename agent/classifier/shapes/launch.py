"""host/launch: the GPUs run small kernels with little real work and there is no collective to wait
in, so the host is not launching them fast enough (HTA's kernel wait; the TF profiler's
kernel-launch-bound; DCGM's "graphics active, SM low")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.classifier.ramp import ramp
from agent.classifier.shapes.shape import Shape, declare
from agent.core.vocabulary import Bucket, HostSubReason, VerdictReason

if TYPE_CHECKING:
    from agent.classifier.features import Features
    from agent.config.classifier import ClassifierSection


def pressure(f: Features, cfg: ClassifierSection) -> float:
    # a spin needs a peer: one process launched with no rank count cannot be waiting in a collective,
    # and a host thread pegged at its core is what cannot launch faster
    if f.host.collective is not False:
        return 0.0
    return ramp(f.cpu_busiest, cfg.cpu_pegged)


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
    lines.append(
        f"its busiest process busy {busy * 100:.0f}% of a core: the host launches kernels as fast as it can"
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
