"""The advice in words (pure): what binds the job, what another instance would do to its step time
and its cost, and what the estimate rests on; all in the JSON the CLI, /api/v1/advice, status and
the report page read (docs/advice.md, "The JSON")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.advice.catalog import Catalog
from agent.advice.estimate import SCALING, Estimate, JobFigures, Ranking, Scaling, ThisNode

AS_WELL = 1.2  # "would do about as well": its step at most this much longer, at its range's top
INPUT = (Scaling.INPUT, Scaling.INPUT_CPU)
# what binds, from the largest share of the step: the word and the scalings it covers
BINDS: tuple[tuple[str, tuple[Scaling, ...]], ...] = (
    ("input", INPUT),
    ("gpu", (Scaling.GPU_WORK,)),
    ("network", (Scaling.CROSS_NODE,)),
    ("sync-wait", (Scaling.IN_NODE,)),
    ("host", (Scaling.HOST,)),
    ("other", (Scaling.UNCHANGED,)),
)
RDMA_WORDS = {
    "erdma": "eRDMA",
    "efa": "EFA",
    "infiniband": "InfiniBand",
    "roce": "RoCE",
    "tcpx": "GPUDirect-TCPX",
}
BASE_ASSUMPTIONS = (
    "the GPUs' work scales between the cards' dense tensor-TFLOPS ratio and their memory-bandwidth ratio"
    " (datasheet peaks, not measured speeds: a real job's ratio can fall outside)",
    "the input wait is the same on any card (a loader that prefetches may hide some of it behind a slower"
    " card's longer work); a CPU decode at most follows the vCPUs per GPU",
    "the GPUs' work may hold up to 40% more of the step than the ledger booked (its samples span work"
    " and waits): the range allows for that",
    "the job keeps its GPU count and batch; prices are per GPU-hour",
)


def step_words(step: tuple[float, float]) -> str:
    """Always with the numbers: a slower card is never named without how much longer each step takes."""
    lo, hi = step
    if hi < 1.0:
        return f"~{1 / hi:.1f}–{1 / lo:.1f}× faster per step"
    if lo > 1.0:
        return f"~{lo:.1f}–{hi:.1f}× longer per step"
    return f"~{lo:.2f}–{hi:.2f}× the step time"


def candidate_words(e: Estimate, catalog: Catalog) -> str:
    assert e.step is not None
    out = f"`{e.instance.id}` {e.instance.gpus}x {e.instance.card} would take {step_words(e.step)}"
    if e.price_ratio is not None:
        out += f" at ~{e.price_ratio:.2g}× the price per GPU-hour (your prices)"
    return out


def as_well_words(e: Estimate) -> str:
    """A candidate the step hardly depends on: named with the most its step could take."""
    assert e.step is not None
    out = f"`{e.instance.id}` {e.instance.gpus}x {e.instance.card} would do about as well: at most"
    out += f" ~{e.step[1]:.2f}× the step time"
    if e.price_ratio is not None:
        out += f", at ~{e.price_ratio:.2g}× the price per GPU-hour (your prices)"
    return out


def binds(r: Ranking) -> tuple[str, float]:
    """The part of the step that is largest, and its share."""
    if not r.shares.by_scaling:
        return "unknown", 0.0
    best = max(BINDS, key=lambda b: r.shares.of(*b[1]))
    return best[0], r.shares.of(*best[1])


def _gb(n: float) -> str:
    return f"{n / 1e9:.0f} GB"


def headline(bind: str, share: float, job: JobFigures, here: ThisNode | None, catalog: Catalog) -> str:
    if bind == "input":
        return f"fix the input first: on any card the data wait stays {share:.0%} of each step"
    if bind == "network":
        nic = f"a {here.network_gbps:g} Gbit/s NIC" if here and here.network_gbps else "the network"
        return f"this job waits {share:.0%} on {nic}: one bigger NVLink node, or RDMA between the nodes"
    if bind == "sync-wait":
        return (
            f"its GPUs wait {share:.0%} on each other: a faster card does not shorten that; look for a"
            " straggler or an uneven split first"
        )
    if bind == "host":
        return (
            f"the host cannot launch kernels or copy fast enough ({share:.0%}): a faster card does not help;"
            " CUDA graphs, pinned memory or larger batches do"
        )
    if bind == "gpu":
        out = f"its GPUs compute {share:.0%} of the time"
        if job.memory_peak_bytes is not None and here is not None:
            out += f" at {_gb(job.memory_peak_bytes)} of {catalog.cards[here.card].memory_gb:g} GB"
        return out
    if bind == "unknown":
        return "nothing booked for this job yet"
    return f"{share:.0%} of its time is idle or checkpointing: no instance changes that"


def _advised(r: Ranking, bind: str) -> list[Estimate]:
    """The one or two candidates worth a line: for an input-bound job the cheapest that does about
    as well; otherwise the cheapest per unit of work and the fastest."""
    fit = [e for e in r.estimates if e.step is not None]
    if not fit:
        return []
    if bind in ("input", "sync-wait", "host", "other"):
        as_well = [e for e in fit if e.step is not None and e.step[1] <= AS_WELL]
        cheaper = [e for e in as_well if e.price_ratio is not None and e.price_ratio < 1.0]
        if cheaper:
            return [min(cheaper, key=lambda e: (e.price_ratio or 0.0, e.instance.id))]
        return as_well[:1]
    best = fit[0]
    fastest = min(fit, key=lambda e: (e.step[1] if e.step else 0.0, e.instance.id))
    faster = fastest.step is not None and fastest.step[1] < 1.0
    return [best, fastest] if faster and fastest is not best else [best]


def advice(
    job_key: str | None,
    job: JobFigures,
    here: ThisNode | None,
    ranking: Ranking | None,
    catalog: Catalog,
    notes: Sequence[str],
    made_at: float,
) -> dict[str, Any]:
    """The advice as the JSON every face reads."""
    assumptions = [*BASE_ASSUMPTIONS, *notes]
    out: dict[str, Any] = {
        "instance": None,
        "binds": "unknown",
        "lines": [],
        "candidates": [],
        "assumptions": assumptions,
        "job": job_key,
        "made_at": round(made_at, 3),
    }
    if here is not None:
        out["instance"] = {
            "id": here.id,
            "cloud": here.cloud,
            "card": here.card,
            "gpus": here.gpus,
            "source": here.source,
        }
    if ranking is None or here is None:
        out["lines"] = ["no advice: this node's instance is not recognised"]
        return out
    bind, share = binds(ranking)
    out["binds"] = bind
    lines = [headline(bind, share, job, here, catalog)]
    if bind == "network":
        kinds = sorted(
            {RDMA_WORDS[e.instance.rdma] for e in ranking.estimates if e.instance.rdma in RDMA_WORDS}
        )
        lines[0] += f" ({', '.join(kinds)} among the candidates)" if kinds else ""
    picked = _advised(ranking, bind)
    for e in picked:
        lines.append(as_well_words(e) if bind != "gpu" else candidate_words(e, catalog))
    if bind == "gpu" and not any(e.step and e.step[1] < 1.0 for e in ranking.estimates):
        lines.append(f"no candidate is faster per step than this node's {here.card}")
    if not picked and ranking.estimates:
        lines.append("no candidate in the catalog would do as well: see the candidates' ranges")
    out["lines"] = lines
    out["candidates"] = [
        {
            "instance": e.instance.id,
            "cloud": e.instance.cloud,
            "card": e.instance.card,
            "gpus": e.instance.gpus,
            "step_ratio": None if e.step is None else [round(e.step[0], 3), round(e.step[1], 3)],
            "price_ratio": None if e.price_ratio is None else round(e.price_ratio, 4),
            "cost_per_work_ratio": None
            if e.cost_per_work is None
            else [round(e.cost_per_work[0], 4), round(e.cost_per_work[1], 4)],
            "excluded": e.excluded,
        }
        for e in ranking.estimates
    ]
    if job.tensor is None or job.dram is None:
        assumptions.append("the job's tensor:DRAM mix is not known: the card ratio spans the whole range")
    if job.memory_peak_bytes is None:
        assumptions.append("the job's memory peak is not known: no candidate is left out for memory")
    if not any(e.price_ratio is not None for e in ranking.estimates):
        assumptions.append("no prices: set [cost] for this node and [advice] prices to rank by cost")
    for name in ranking.shares.unknown:
        assumptions.append(f'the ledger bucket "{name}" has no scaling rule: taken as unchanged')
    if ranking.shares.of(Scaling.HOST) > 0:
        assumptions.append("host-launch and host-copy time is unchanged by a faster card")
    for e in ranking.estimates:
        assumptions.extend(f"{e.instance.id}: {n}" for n in e.notes)
    return out


def status_line(a: dict[str, Any]) -> str:
    """The one line ``status`` and ``top`` show."""
    lines = a.get("lines") or []
    head = lines[0] if lines else "no advice yet"
    return f"advice: {head}" + (f"; {lines[1]}" if len(lines) > 1 else "")


def scaling_names() -> set[str]:
    return set(SCALING)
