"""A verdict's top reason in one stable word (``VerdictReason``), for ``training_node_verdict_info``
and the fleet rules that name a job's straggler with its cause (pure)."""

from __future__ import annotations

from agent.classifier.shapes import SHAPES
from agent.classifier.verdict import Judgement
from agent.core.vocabulary import DataSubReason, HostSubReason, Verdict, VerdictReason


def cause(v: Judgement) -> VerdictReason:
    f = v.features
    if f.slow_gpus and v.verdict in (Verdict.COMPUTE, Verdict.SYNC_WAIT):
        return VerdictReason.DEGRADED_GPU
    if v.verdict == Verdict.DATA:
        if v.sub_reason == DataSubReason.CPU:
            return VerdictReason.CPU
        if v.sub_reason == DataSubReason.NETWORK_INPUT:
            return VerdictReason.NETWORK_INPUT
        return VerdictReason.STORAGE
    if v.verdict == Verdict.NETWORK:
        link = max([x.pressure for x in f.links_wait] + [x.pressure for x in f.traffic], default=0.0)
        jam = max((x.pressure for x in f.congestion), default=0.0)
        return VerdictReason.CONGESTION if jam > link else VerdictReason.LINK
    if v.verdict == Verdict.SYNC_WAIT:
        return VerdictReason.PEER
    if v.verdict == Verdict.HOST and v.sub_reason in SHAPES:
        return SHAPES[HostSubReason(v.sub_reason)].cause
    if v.verdict == Verdict.COMPUTE:
        return VerdictReason.GPU
    if v.verdict == Verdict.IDLE:
        return VerdictReason.NO_JOB if f.trainers == 0 else VerdictReason.NO_WORK
    return VerdictReason.UNCLEAR
