"""host/evaluation: the training waits while the trainer runs its evaluation loop. From outside an
evaluation is forward passes, or GPUs starved by a validation loader: compute or data. Only the
trainer can say it is evaluating, so only ``tna_client``'s spans tell this shape (``on_validation_*``,
Hugging Face's evaluate), and the ledger books it tick by tick from them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.classifier.shapes.shape import Shape, declare
from agent.core.vocabulary import Bucket, HostSubReason, VerdictReason

if TYPE_CHECKING:
    from agent.classifier.features import Features
    from agent.config.classifier import ClassifierSection


def pressure(f: Features, cfg: ClassifierSection) -> float:
    return f.host.eval_share  # of the whole window: whatever the GPUs did, it was not training


def reasons(f: Features) -> list[str]:
    h = f.host
    every = f", one every ~{h.eval_period:.0f} s" if h.eval_period else ""
    return [
        f"evaluation held the training {h.eval_share * 100:.0f}% of the time (from the trainer): "
        f"{h.evals} began in the last {f.span_seconds:.0f} s, each ~{h.eval_seconds:.1f} s{every}",
    ]


def hint(f: Features) -> str:
    return (
        f"Evaluation takes {f.host.eval_share * 100:.0f}% of the training's time: validate less often "
        "(Lightning's val_check_interval or check_val_every_n_epoch, Hugging Face's eval_steps), on fewer "
        "batches (limit_val_batches, a smaller eval set), or with a larger eval batch; give the validation "
        "DataLoader its own workers."
    )


SHAPE = declare(
    Shape(
        sub_reason=HostSubReason.EVALUATION,
        cause=VerdictReason.EVALUATION,
        bucket=Bucket.EVALUATION,
        explains="time",
        pressure=pressure,
        reasons=reasons,
        hint=hint,
        remedy=(
            "Evaluation takes a large share: validate less often or on fewer batches, with a larger eval "
            "batch and a validation DataLoader with workers of its own."
        ),
        what="the training waits while the trainer evaluates (told by tna_client)",
        by_pressure=lambda _f: False,
    )
)
