"""The report page's data from the running agent: the ledger's slots and summary over the period (the
node's, or one job's), and the timeline's points and marks. Copied on the event loop (the ledger
changes there every tick), so the page itself can be built in a thread."""

from __future__ import annotations

from typing import Any

from agent.core.vocabulary import CheckpointPhase, Market
from agent.ledger.assign import BUCKETS
from agent.ledger.component import LedgerComponent
from agent.ledger.summary import summarize
from agent.report.data import PageData
from agent.report.timeline import Mark, Timeline


class UnknownJob(ValueError):
    """``--job`` names a job the ledger holds no GPU-seconds of in the period."""


def page_data(
    ledger: LedgerComponent,
    timeline: Timeline,
    now: float,
    window: float,
    node: str,
    version: str,
    job: str | None = None,
    network: bool = False,
) -> PageData:
    """``network``: the page for the metrics port, which shows what the TCP status shows: no host
    name, no job name or user, no instance id, no event details (paths, peers, raw text)."""
    book = ledger.ledger.book
    summary = ledger.summary(now, window)
    t0 = now - window
    slots: list[tuple[float, list[float]]] = []
    for s in book.recent(t0):
        if job is None:
            slots.append((s.start, list(s.seconds)))
        elif job in s.jobs:
            slots.append((s.start, list(s.jobs[job][0])))
    slots.reverse()
    job_name = None
    # the page's period starts with the first slot it draws (a job's first, for a job's page)
    since_ts = max(t0, float(slots[0][0])) if slots else now
    if job is not None:
        seconds, cost = ledger.ledger.book.jobs_since(t0).get(
            job, ([0.0] * len(BUCKETS), [0.0] * len(BUCKETS))
        )
        if not slots or sum(seconds) <= 0:
            raise UnknownJob(f"no GPU-seconds of job {job!r} in the ledger over this period")
        cadence = {k: summary[k] for k in ("cadence", "cadence_lines")}
        summary = summarize(seconds, cost if summary["cost"] else None, since_ts, now, ledger.currency)
        summary.update(cadence)
        job_name = ledger.ledger.job_names.get(job, {}).get("name")
    identity = ledger.identity
    instance: dict[str, Any] | None = None
    if identity is not None or ledger.instance_type:
        instance = {
            "id": identity.instance_id if identity else None,
            "type": ledger.instance_type,
            "cloud": identity.provider if identity else None,
            "region": identity.region if identity else None,
            "market": ledger.market if ledger.market != Market.ON_DEMAND or identity else None,
        }
    reclaims = [r.as_dict() for r in ledger.ledger.reclaims if r.at >= since_ts]
    if job is not None:
        reclaims = [r for r in reclaims if job in r["jobs"] or r["outcome"] != CheckpointPhase.MISSED]
    marks = timeline.marks_between(since_ts, now)
    if network:
        node, job_name = "this node", None
        if instance is not None:
            instance["id"] = None
        marks = [Mark(m.t, m.kind, m.label) for m in marks]
        reclaims = [{**r, "jobs": {}} for r in reclaims]
    return PageData(
        node=node,
        since=since_ts,
        until=now,
        version=version,
        made_at=now,
        buckets=[str(b) for b in BUCKETS],
        resolution=book.resolution,
        slots=slots,
        summary=summary,
        job=job,
        job_name=job_name,
        instance=instance,
        points=timeline.points(since_ts, now),
        marks=marks,
        reclaims=reclaims,
    )
