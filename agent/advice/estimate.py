"""The estimate (pure): a job's own figures and the node it ran on in, for each candidate instance the
step time as a range of ratios to this node's, the price and the cost per unit of the job's work out.

The step is the ledger's buckets, each scaling its own way (:data:`SCALING`): the GPUs' work by the
card (between the tensor-TFLOPS ratio and the memory-bandwidth ratio, weighted by the job's tensor
and DRAM activity where known, the whole span where not), the input wait not at all (a CPU decode by
vCPUs per GPU, at most), the wait on other nodes by the NIC and RDMA, the wait on the node's other
GPUs by NVLink. A ratio is time on the candidate over time here: 2.0 takes twice as long.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from agent.advice.catalog import Card, Catalog, Instance

Span = tuple[float, float]  # (lo, hi), lo <= hi
ONE: Span = (1.0, 1.0)


class Scaling(StrEnum):
    """How a bucket's seconds change on another instance."""

    GPU_WORK = "gpu-work"  # by the card ratio
    INPUT = "input"  # unchanged by the card: the storage or the network the input comes from
    INPUT_CPU = "input-cpu"  # a CPU decode: by vCPUs per GPU, at most
    CROSS_NODE = "cross-node"  # collectives over the NIC: by its Gbit/s per GPU and RDMA
    IN_NODE = "in-node"  # waiting on the node's other GPUs: by NVLink or not
    HOST = "host"  # the host launching kernels or copying pageable memory: unchanged by the card
    UNCHANGED = "unchanged"  # idle, checkpoints
    NOT_STEP = "not-step"  # no job, startup, lost work: not the job's step time


# One row per ledger bucket (agent.core.vocabulary.Bucket, read by name: a bucket not booked is 0 s;
# a name missing here is taken as unchanged and said among the assumptions).
SCALING: Mapping[str, Scaling] = {
    "productive": Scaling.GPU_WORK,
    "evaluation": Scaling.GPU_WORK,  # eval's forward passes scale like the training's GPU work
    "data-storage": Scaling.INPUT,
    "data-cpu": Scaling.INPUT_CPU,
    "data-network": Scaling.INPUT,
    "network": Scaling.CROSS_NODE,
    "sync-wait": Scaling.IN_NODE,
    "host-launch": Scaling.HOST,
    "host-copy": Scaling.HOST,
    "idle": Scaling.UNCHANGED,
    "checkpoint": Scaling.UNCHANGED,
    "no-job": Scaling.NOT_STEP,
    "startup": Scaling.NOT_STEP,
    "lost-to-preemption": Scaling.NOT_STEP,
}
WEIGHT_SPREAD = 0.25  # how far the tensor:DRAM weight is trusted either way: the range around it
# how much more GPU work a step may hold than the ledger booked, as a part of what it booked: set on
# the advice lab's tuning draws (tests/advice/test_advice_lab.py, GPUs with GPM), where the ledger
# booked 10-35% less than the PyTorch jobs' own logs said, never more; those ran before a lab fix, and
# its held-out draws after it were booked within 7 points either way (docs/advice.md): not re-tuned
SHARE_SPREAD = 0.4
RDMA_GAIN = 0.5  # RDMA where there was none: at best half the wait of the same Gbit/s over TCP
NVLINK_GAIN = 3.0  # NVLink against PCIe peer traffic: at most this many times faster
UNKNOWN_LINK: Span = (0.5, 2.0)  # the wait across nodes where this node's NIC is not known


@dataclass(frozen=True, slots=True)
class JobFigures:
    """What the job did, over its run: GPU-seconds by bucket name; its mean tensor and DRAM activity
    while working (0-1, None: unknown); its GPU memory peak; how many GPUs it had here."""

    buckets: Mapping[str, float]
    gpus: int
    tensor: float | None = None
    dram: float | None = None
    memory_peak_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ThisNode:
    """The instance the job ran on: a catalog row, or what NVML and the host said (network unknown)."""

    id: str
    cloud: str | None
    card: str
    gpus: int
    vcpus: int
    nvlink: bool | None = None
    network_gbps: float | None = None
    rdma: str | None = None
    source: str = ""


@dataclass(frozen=True, slots=True)
class Estimate:
    instance: Instance
    step: Span | None  # None: left out
    price_ratio: float | None  # per GPU-hour, candidate over this node
    cost_per_work: Span | None
    excluded: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def rank_key(self) -> tuple[int, float]:
        if self.step is None:
            return (3, 0.0)
        if self.cost_per_work is not None:
            return (0, sum(self.cost_per_work) / 2)
        return (1, sum(self.step) / 2)


@dataclass(frozen=True, slots=True)
class StepShares:
    """The job's step time split by how it scales, each a share of the step (they add up to 1)."""

    by_scaling: Mapping[Scaling, float]
    unknown: tuple[str, ...] = ()  # bucket names the table lacks (taken as unchanged)
    total: float = 0.0  # the step's GPU-seconds

    def of(self, *kinds: Scaling) -> float:
        return sum(self.by_scaling.get(k, 0.0) for k in kinds)


def shares(buckets: Mapping[str, float]) -> StepShares:
    by: dict[Scaling, float] = {}
    unknown = []
    for name, seconds in buckets.items():
        kind = SCALING.get(name)
        if kind is None:
            unknown.append(name)
            kind = Scaling.UNCHANGED
        if kind is Scaling.NOT_STEP or seconds <= 0:
            continue
        by[kind] = by.get(kind, 0.0) + seconds
    total = sum(by.values())
    return StepShares(
        {k: v / total for k, v in by.items()} if total > 0 else {}, tuple(sorted(unknown)), total
    )


def _sorted(a: float, b: float) -> Span:
    return (a, b) if a <= b else (b, a)


def gpu_work(here: Card, there: Card, tensor: float | None, dram: float | None) -> Span:
    """The card ratio for the GPUs' work: TFLOPS-bound work scales by the TFLOPS ratio, memory-bound
    work by the bandwidth ratio; the job's tensor:DRAM activity places it between the two."""
    tf = here.tensor_tflops / there.tensor_tflops
    bw = here.bandwidth_gbs / there.bandwidth_gbs
    if tensor is None or dram is None or tensor + dram <= 0:
        return _sorted(tf, bw)
    w = tensor / (tensor + dram)
    lo_w, hi_w = max(0.0, w - WEIGHT_SPREAD), min(1.0, w + WEIGHT_SPREAD)
    return _sorted(lo_w * tf + (1 - lo_w) * bw, hi_w * tf + (1 - hi_w) * bw)


def input_cpu(here: ThisNode, there: Instance) -> Span:
    """A decode on the CPU runs on the vCPUs each GPU has, at most: between unchanged and that ratio
    (the pipeline may not use them all)."""
    r = (here.vcpus / here.gpus) / (there.vcpus / there.gpus)
    return _sorted(1.0, r)


def _rdma(kind: str | None) -> bool:
    return kind not in (None, "none", "tcpx")


def cross_node(here: ThisNode, there: Instance) -> Span:
    """Collectives over the NIC: by Gbit/s per GPU, and by RDMA where one side has it."""
    if here.network_gbps is None:
        return UNKNOWN_LINK
    r = (here.network_gbps / here.gpus) / (there.network_gbps / there.gpus)
    if _rdma(there.rdma) and not _rdma(here.rdma):
        return (r * RDMA_GAIN, r)
    if _rdma(here.rdma) and not _rdma(there.rdma):
        return (r, r / RDMA_GAIN)
    return (r, r)


def in_node(here: ThisNode, there: Instance, job_gpus: int) -> Span:
    """Waiting on the node's other GPUs: by NVLink against PCIe; a candidate too small for the job's
    GPUs puts the rest on another node, over the NIC."""
    if there.gpus < job_gpus:
        return (1.0, NVLINK_GAIN * 2)
    if here.nvlink is None or here.nvlink == there.nvlink:
        return ONE
    return (1.0, NVLINK_GAIN) if here.nvlink else (1 / NVLINK_GAIN, 1.0)


def _booking(share: float, gpu: Span, lo: float, hi: float) -> Span:
    """The step's range widened for GPU work booked short by up to SHARE_SPREAD of itself, the rest of
    the step (the waits, taken as unchanged) giving it up. No GPU work booked: nothing to widen, and
    such a job still gains nothing from a faster card."""
    more = min(share * SHARE_SPREAD, 1.0 - share)
    a, b = gpu
    return lo + min(0.0, more * (a - 1.0)), hi + max(0.0, more * (b - 1.0))


def fits(job: JobFigures, card: Card, headroom: float) -> str | None:
    """Why the card cannot hold the job's memory peak with ``headroom`` free; None when it can."""
    if job.memory_peak_bytes is None:
        return None
    usable = card.memory_gb * 1e9 * (1 - headroom)
    if job.memory_peak_bytes <= usable:
        return None
    return (
        f"its {card.memory_gb:g} GB cannot hold the job's peak of {job.memory_peak_bytes / 1e9:.0f} GB"
        f" with {headroom:.0%} free"
    )


def estimate(
    job: JobFigures,
    here: ThisNode,
    there: Instance,
    catalog: Catalog,
    headroom: float,
    price_here: float | None = None,
    price_there: float | None = None,
) -> Estimate:
    """One candidate: the step range, the price per GPU-hour against this node's, the cost per work."""
    card_here, card_there = catalog.cards[here.card], catalog.cards[there.card]
    why = fits(job, card_there, headroom)
    if why is not None:
        return Estimate(there, None, None, None, why)
    sh = shares(job.buckets)
    spans: dict[Scaling, Span] = {
        Scaling.GPU_WORK: gpu_work(card_here, card_there, job.tensor, job.dram),
        Scaling.INPUT_CPU: input_cpu(here, there),
        Scaling.CROSS_NODE: cross_node(here, there),
        Scaling.IN_NODE: in_node(here, there, job.gpus),
    }
    lo = hi = 0.0
    for kind, share in sh.by_scaling.items():
        a, b = spans.get(kind, ONE)
        lo += share * a
        hi += share * b
    lo, hi = _booking(sh.of(Scaling.GPU_WORK), spans[Scaling.GPU_WORK], lo, hi)
    step = (lo, hi) if sh.total > 0 else ONE
    price = None
    if price_here and price_there:
        price = (price_there / there.gpus) / (price_here / here.gpus)
    cost = (step[0] * price, step[1] * price) if price is not None else None
    notes: tuple[str, ...] = ()
    if there.gpus < job.gpus:
        notes = (f"the job's {job.gpus} GPUs would span {-(-job.gpus // there.gpus)} instances",)
    return Estimate(there, step, price, cost, None, notes)


def candidates(catalog: Catalog, clouds: Iterable[str], job_gpus: int, here_id: str) -> list[Instance]:
    """For each family in ``clouds`` (every cloud where empty), its smallest size with the job's GPUs,
    else its largest; this node's own type left out. User rows without a family stand alone."""
    wanted = set(clouds)
    by_family: dict[str, list[Instance]] = {}
    for inst in catalog.instances.values():
        if inst.id == here_id or (wanted and inst.cloud not in wanted):
            continue
        by_family.setdefault(inst.family or inst.id, []).append(inst)
    out = []
    for sizes in by_family.values():
        enough = [s for s in sizes if s.gpus >= job_gpus]
        pick = min(enough, key=lambda s: (s.gpus, s.vcpus)) if enough else max(sizes, key=lambda s: s.gpus)
        out.append(pick)
    return sorted(out, key=lambda s: s.id)


@dataclass(frozen=True, slots=True)
class Ranking:
    shares: StepShares
    estimates: tuple[Estimate, ...] = field(default_factory=tuple)


def rank(
    job: JobFigures,
    here: ThisNode,
    catalog: Catalog,
    headroom: float,
    prices: Mapping[str, float],
    clouds: Iterable[str] = (),
    price_here: float | None = None,
) -> Ranking:
    """Every candidate, by cost per unit of work where priced, then by step time, the left-out last."""
    out = [
        estimate(job, here, inst, catalog, headroom, price_here, prices.get(inst.id))
        for inst in candidates(catalog, clouds, job.gpus, here.id)
    ]
    out.sort(key=lambda e: (e.rank_key, e.instance.id))
    return Ranking(shares(job.buckets), tuple(out))
