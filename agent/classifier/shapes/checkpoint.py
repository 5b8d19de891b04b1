"""host/checkpoint: the GPUs starve while the training process writes, in stalls that recur (a
synchronous ``torch.save``/``trainer.save_checkpoint`` to a slow volume). Google's goodput
measurement books this as UNPRODUCTIVE_CHECKPOINT_SAVE_TIME, apart from data loading. Where
``tna_client`` tells the trainer's saves, they are the evidence ("from the trainer"), and the ledger
books them tick by tick from the trainer's spans."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.classifier.shapes.shape import SaveView, Shape, declare
from agent.core.vocabulary import Bucket, HostSubReason, VerdictReason

if TYPE_CHECKING:
    from agent.classifier.features import Features
    from agent.classifier.host import HostFeatures
    from agent.config.classifier import ClassifierSection

RECUR = 2  # saves in the window for the full pressure: one stall could be anything that wrote


def pressure(f: Features, cfg: ClassifierSection) -> float:
    if f.host.from_trainer:  # the trainer's word: no need to see the saves recur
        return min(1.0, f.host.save_share / f.starved_share) if f.starved_share > 0 else 0.0
    if f.starved_share <= 0 or not f.host.stalls:
        return 0.0
    # the share of the starvation spent inside saves, as sure as the saves recur
    return min(1.0, f.host.save_share / f.starved_share) * min(1.0, f.host.stalls / RECUR)


def _mb(v: float) -> str:
    return f"{v / 1e6:.0f} MB" if v < 1e9 else f"{v / 1e9:.2f} GB"


def reasons(f: Features) -> list[str]:
    h = f.host
    every = f", one every ~{h.save_period:.0f} s" if h.save_period else ""
    if h.from_trainer:
        return [
            f"checkpoint saves held the training {h.save_share * 100:.0f}% of the time (from the trainer): "
            f"{h.saves} began in the last {f.span_seconds:.0f} s, each ~{h.save_seconds:.1f} s{every}",
            f"the GPUs starved {f.starved_share * 100:.0f}% of the time; the training process "
            f"({f.trainer_label}) wrote {(h.write_starved or 0) / 1e6:.1f} MB/s while they did",
        ]
    return [
        f"checkpoint saves held the GPUs {h.save_share * 100:.0f}% of the time: {h.saves} began in the last "
        f"{f.span_seconds:.0f} s, each ~{h.save_seconds:.1f} s ({_mb(h.save_bytes)} written){every}",
        f"the training process ({f.trainer_label}) wrote {(h.write_starved or 0) / 1e6:.1f} MB/s while the "
        f"GPUs starved; it read {(f.trainer_read or 0) / 1e6:.1f} MB/s",
    ]


def hint(f: Features) -> str:
    h = f.host
    return (
        f"A synchronous checkpoint holds the GPUs {h.save_share * 100:.0f}% of the time "
        f"(~{h.save_seconds:.1f} s a save): save asynchronously (torch.distributed.checkpoint.async_save, "
        "Lightning's AsyncCheckpointIO, or copy the state to CPU and write it from a thread), write to local "
        "NVMe and upload after, or save less often (the ledger's advised cadence: training-node-agent "
        "report)."
    )


def save_lines(h: HostFeatures, saves: SaveView) -> list[str]:
    """What the saves cost an hour at the configured price, and the interval the reclaim risk asks
    for a save that long, in the ledger's figures."""
    if not h.stalls or h.save_seconds <= 0:
        return []
    said = saves(h.save_seconds, h.save_share, h.save_period)
    out = []
    if said.per_hour is not None:
        out.append(f"the saves cost ~{said.per_hour:.2f} {said.currency} an hour of this node's price")
    if said.interval is not None and said.mtbi is not None:
        now = f" (now every ~{h.save_period:.0f} s)" if h.save_period else ""
        out.append(
            f"at one reclaim every ~{said.mtbi / 3600:.1f} h ({said.mtbi_source}) a "
            f"{h.save_seconds:.1f} s save is best made every ~{said.interval / 60:.0f} min (Young/Daly){now}"
        )
    return out


SHAPE = declare(
    Shape(
        sub_reason=HostSubReason.CHECKPOINT,
        cause=VerdictReason.CHECKPOINT_SAVE,
        bucket=Bucket.CHECKPOINT,
        explains="starved",
        pressure=pressure,
        reasons=reasons,
        hint=hint,
        remedy=(
            "Checkpoints take a large share: save asynchronously (torch.distributed.checkpoint async_save, "
            "Lightning's AsyncCheckpointIO), shard the state across ranks, or checkpoint at the advised "
            "cadence rather than more often."
        ),
        what="the GPUs idle while the training process writes a checkpoint, recurring",
        by_pressure=lambda f: not f.host.from_trainer,
    )
)
