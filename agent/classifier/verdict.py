"""The classifier as one pure function: a window of samples, the learned baselines and the config in,
a :class:`Judgement` with its reasons and remedy out. Hysteresis, warm-up and checkpoint holds are
layered on top by :mod:`agent.classifier.engine`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.classifier.baselines import Baselines
from agent.classifier.families import FamilyMeans
from agent.classifier.features import Features, measure
from agent.classifier.hints import hint
from agent.classifier.reasons import Second, explain
from agent.classifier.samples import Sample
from agent.classifier.scores import Scores, decide, score, second_cause
from agent.classifier.tallies import GpuTally, GpuWindow
from agent.config.classifier import ClassifierSection
from agent.core.vocabulary import Verdict


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: str  # a Verdict
    sub_reason: str | None  # a DataSubReason, for data
    scores: dict[str, float]
    reasons: tuple[str, ...]
    hint: str
    health: tuple[str, ...]
    features: Features
    detail: Scores

    @property
    def label(self) -> str:
        return f"{self.verdict}/{self.sub_reason}" if self.sub_reason else self.verdict


def verdict_for(
    f: Features,
    s: Scores,
    verdict: str,
    sub_reason: str | None = None,
    shown_at: float = 0.0,
    second_at: float | None = None,
) -> Judgement:
    """A :class:`Judgement` for ``verdict`` (which may be one the hysteresis keeps) on these numbers.
    A kept ``data`` (``host``) verdict keeps its ``sub_reason`` unless this window shows data (host)
    pressure itself, scoring above ``shown_at``: a network window's stray 1% of CPU pressure showed a
    kept data/storage verdict as data/cpu. A ``compute`` verdict names the cause that still costs
    ``second_at`` of the time or more."""
    sub = None
    if verdict == Verdict.DATA:
        shown = max(s.data_storage, s.data_cpu, s.data_network) > shown_at
        sub = s.sub_reason if (shown or sub_reason is None) else sub_reason
    elif verdict == Verdict.HOST:
        shown = s.host_sub is not None and s.by_class[Verdict.HOST] > shown_at
        sub = s.host_sub if (shown or sub_reason is None) else sub_reason
    second = None
    if verdict == Verdict.COMPUTE and second_at is not None:
        cause = second_cause(s, second_at)
        if cause is not None:
            second = Second(cause, _sub_of(cause, s), s.by_class[cause])
    return Judgement(
        verdict=verdict,
        sub_reason=sub,
        scores=s.by_class,
        reasons=explain(f, s, verdict, sub, second),
        hint=hint(verdict, sub, f, second),
        health=f.health,
        features=f,
        detail=s,
    )


def classify(
    window: Sequence[Sample],
    baselines: Baselines,
    cfg: ClassifierSection,
    current: str | None = None,
    tallies: Sequence[GpuTally] | None = None,
    family_means: FamilyMeans | None = None,
    gpus: GpuWindow | None = None,
) -> Judgement:
    """This window's vote. ``current`` is the verdict in force: it keeps the vote inside its exit band.
    ``tallies``, ``family_means`` and ``gpus`` are the caller's memo of parts of the computation (see
    ``features.measure``); the result is the same without them."""
    f = measure(window, baselines, cfg, tallies, family_means, gpus)
    s = score(f)
    return verdict_for(f, s, own_slow_gpu(f, s, decide(s, current, cfg)), second_at=cfg.second_cause)


def _sub_of(verdict: str, s: Scores) -> str | None:
    if verdict == Verdict.DATA:
        return s.sub_reason
    return s.host_sub if verdict == Verdict.HOST else None


def own_slow_gpu(f: Features, s: Scores, vote: str) -> str:
    """Where a GPU of this node is named slow and the vote splits between its work (compute) and its
    peers' spinning (sync-wait, or network where the NIC carried the all-reduce meanwhile), the split
    is that GPU: its peers wait in their collectives for a rank of their own node, which is a sync
    wait. ``compute`` stands where it leads (and spinning does not outweigh work), else ``sync-wait``;
    the cause is ``degraded-gpu`` either way. A 1-in-4 slow GPU whose peers wait two thirds of the
    time read ``mixed`` (``unclear``), hiding the GPU from the fleet's straggler rule."""
    if vote != Verdict.MIXED or not f.slow_gpus:
        return vote
    ranked = sorted(s.by_class, key=s.by_class.__getitem__, reverse=True)
    if Verdict.COMPUTE not in ranked[:2] or not {Verdict.SYNC_WAIT, Verdict.NETWORK} & set(ranked[:2]):
        return vote
    return Verdict.COMPUTE if ranked[0] == Verdict.COMPUTE and not s.compute_vetoed else Verdict.SYNC_WAIT
