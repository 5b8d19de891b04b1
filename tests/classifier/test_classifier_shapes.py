"""A host shape is one declaration (agent/classifier/shapes/<shape>.py): every reader finds what it
needs in it, and a new shape that lacks a piece is told which (issue 48, item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.classifier.features import Features
from agent.classifier.shapes import SHAPES, Shape
from agent.config.classifier import ClassifierSection
from agent.core.vocabulary import Bucket, HostSubReason, VerdictReason
from agent.ledger.assign import WAITING
from agent.ledger.summary import REMEDIES
from lab.hostdraws import TRUTH as LAB_JOBS

REPO = Path(__file__).resolve().parents[2]
# shapes no outside reading tells, with the test whose real framework job has tna_client tell them
TOLD_BY_TRAINER = {"host/evaluation": "tests/checkpoint/test_client_spans.py"}


def shape_gaps(shape: Shape) -> list[str]:
    """What the readers of a shape miss in it, each named."""
    gaps = []
    label = f"`host` / `{shape.sub_reason}`"
    if shape.sub_reason not in set(HostSubReason):
        gaps.append(f"vocabulary: no HostSubReason member {shape.sub_reason!r}")
    if shape.cause not in set(VerdictReason):
        gaps.append(
            f"vocabulary: no VerdictReason member {shape.cause!r} (training_node_verdict_info's reason)"
        )
    if shape.bucket not in set(Bucket):
        gaps.append(f"vocabulary: no Bucket member {shape.bucket!r} (the ledger's)")
    elif shape.bucket not in WAITING and shape.bucket != Bucket.CHECKPOINT and shape.explains != "time":
        # a wait the trainer's reported save overlapped becomes checkpoint; a shape of the whole time
        # (the trainer's evaluation) is no wait, and a save reported after it must not take it
        gaps.append(f"ledger: {shape.bucket} is not among the waiting buckets a trainer's save moves")
    if REMEDIES.get(shape.bucket) != shape.remedy:
        gaps.append(f"ledger: REMEDIES has not the shape's remedy for {shape.bucket}")
    if shape.explains not in ("spinning", "starved", "time"):
        gaps.append(f"scores: it explains {shape.explains!r}, neither spinning, starved nor the time")
    if label not in (REPO / "docs" / "classifier.md").read_text():
        gaps.append(f"docs/classifier.md: no row {label} in the verdict table")
    readme = (REPO / "README.md").read_text()
    if f"`{shape.cause}`" not in readme or f"`{shape.bucket}`" not in readme:
        gaps.append(f"README: its cause word `{shape.cause}` or bucket `{shape.bucket}` is not listed")
    told = TOLD_BY_TRAINER.get(f"host/{shape.sub_reason}")
    if told is not None:  # only the trainer can tell it: its test runs a real framework job
        if not (REPO / told).exists():
            gaps.append(f"lab: {told}, the real framework job that tells host/{shape.sub_reason}, is missing")
    elif f"host/{shape.sub_reason}" not in LAB_JOBS.values():
        gaps.append(f"lab: no PyTorch job of host/{shape.sub_reason} in lab/hostdraws.py")
    nothing = Features(samples=0, span_seconds=0.0, gpus=0)
    if shape.pressure(nothing, ClassifierSection()) != 0.0:
        gaps.append("pressure: not 0 on an empty window")
    if not all(isinstance(x, str) for x in (*shape.reasons(nothing), shape.hint(nothing), shape.what)):
        gaps.append("words: reasons, hint and what must be text")
    return gaps


def test_every_host_sub_reason_is_a_declared_shape() -> None:
    assert set(SHAPES) == set(HostSubReason)


@pytest.mark.parametrize("sub", list(SHAPES), ids=str)
def test_every_reader_sees_the_shape(sub: HostSubReason) -> None:
    assert shape_gaps(SHAPES[sub]) == []


def test_a_shape_lacking_its_pieces_is_told_which() -> None:
    base = SHAPES[HostSubReason.PAGEABLE_COPY]
    toy = base._replace(sub_reason="toy-accumulation", cause="no-sync", bucket="host-toy", remedy="toy")
    gaps = shape_gaps(toy)  # type: ignore[arg-type]
    for piece in (
        "HostSubReason member 'toy-accumulation'",
        "VerdictReason member 'no-sync'",
        "Bucket member 'host-toy'",
        "docs/classifier.md",
        "README",
        "lab/hostdraws.py",
    ):
        assert any(piece in g for g in gaps), (piece, gaps)
    wrong = shape_gaps(base._replace(remedy="something else"))
    assert wrong == [f"ledger: REMEDIES has not the shape's remedy for {base.bucket}"]
