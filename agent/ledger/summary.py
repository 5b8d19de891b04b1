"""The ledger in words (pure): the status section, the ``report`` table with a bar per bucket and
the digest lines, all from one summary dict."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agent.classifier.published import HINTS, SHAPES
from agent.ledger.assign import BUCKETS, Bucket
from agent.ledger.cadence import human

REMEDIES: dict[str, str] = {
    Bucket.DATA_STORAGE: HINTS["data/storage"],
    Bucket.DATA_CPU: HINTS["data/cpu"],
    Bucket.DATA_NETWORK: HINTS["data/network-input"],
    Bucket.NETWORK: HINTS["network"],
    Bucket.SYNC_WAIT: HINTS["sync-wait"],
    Bucket.IDLE: HINTS["idle/stalled"],
    Bucket.NO_JOB: (
        "GPUs are paid for with no training process on them: release the instance, or give it work."
    ),
    **{sh.bucket: sh.remedy for sh in SHAPES.values()},
    Bucket.LOST: (
        "Work is lost at reclaims: checkpoint at the advised cadence, and make the final checkpoint fit "
        "the notice (training-node-agent drill)."
    ),
    Bucket.STARTUP: (
        "Jobs take long to start: cache the container image, the dataset index and the model weights "
        "on local NVMe; resume from the latest checkpoint without re-validating it."
    ),
}


def cost_summary(currency: Any, cost: list[float]) -> dict[str, Any]:
    """Money by bucket, its total and what was not productive: the node's and each job's alike."""
    spent = sum(cost)
    return {
        "currency": currency,
        "total": round(spent, 4),
        "wasted": round(spent - cost[BUCKETS.index(Bucket.PRODUCTIVE)], 4),
        "buckets": {str(b): round(c, 4) for b, c in zip(BUCKETS, cost, strict=True)},
    }


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def summarize(
    seconds: list[float],
    cost: list[float] | None,
    since: float,
    now: float,
    currency: str,
    extra_cost: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Buckets, ratio, money and the top remedy over one period."""
    total = sum(seconds)
    productive = seconds[BUCKETS.index(Bucket.PRODUCTIVE)]
    buckets = {str(b): round(s, 3) for b, s in zip(BUCKETS, seconds, strict=True)}
    waste = sorted(
        ((s, b) for b, s in zip(BUCKETS, seconds, strict=True) if b is not Bucket.PRODUCTIVE and s > 0),
        reverse=True,
    )
    top = waste[0][1] if waste else None
    out: dict[str, Any] = {
        "since": iso(since),
        "window_seconds": round(max(0.0, now - since), 3),
        "ratio": round(productive / total, 6) if total > 0 else None,
        "gpu_seconds": round(total, 3),
        "buckets": buckets,
        "top_waste": str(top) if top else None,
        "remedy": REMEDIES.get(top, "") if top else "",
        "cost": None,
    }
    if cost is not None:
        out["cost"] = {**cost_summary(currency, cost), **(extra_cost or {})}
    return out


def _bar(share: float, width: int = 24) -> str:
    eighths = round(share * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[part]).ljust(width)


def table(s: dict[str, Any]) -> list[str]:
    """One row per bucket: GPU-hours, share with a bar, money."""
    total = s["gpu_seconds"] or 0.0
    money = s["cost"]
    head = f"{'bucket':<20} {'GPU-h':>9} {'share':>6}  {'':<24}"
    if money:
        head += f" {money['currency']:>10}"
    out = [head]
    for b in BUCKETS:
        sec = s["buckets"][b]
        share = sec / total if total else 0.0
        row = f"{b:<20} {sec / 3600:>9.3f} {share:>6.1%}  {_bar(share)}"
        if money:
            row += f" {money['buckets'][b]:>10.2f}"
        out.append(row)
    tail = f"{'total':<20} {total / 3600:>9.3f} {'':>6}  {'':<24}"
    if money:
        tail += f" {money['total']:>10.2f}"
    out.append(tail)
    return out


def lines(s: dict[str, Any], cadence: list[str], reclaim: str | None) -> list[str]:
    """The few lines ``status`` and the digest show."""
    ratio = s["ratio"]
    out = [
        f"goodput {ratio:.1%} over {human(s['window_seconds'])} ({s['gpu_seconds'] / 3600:.2f} GPU-h)"
        if ratio is not None
        else "goodput: nothing booked yet"
    ]
    shares = sorted(((v, k) for k, v in s["buckets"].items() if v > 0), reverse=True)
    total = s["gpu_seconds"] or 1.0
    if shares:
        out.append("  " + ", ".join(f"{k} {v / total:.0%}" for v, k in shares[:5]))
    money = s["cost"]
    if money:
        line = f"cost {money['total']:.2f} {money['currency']}, wasted {money['wasted']:.2f}"
        if money.get("spot_saving"):
            line += f", spot saved {money['spot_saving']:.2f} against on-demand"
        out.append(line)
    if s["top_waste"]:
        out.append(f"top remedy ({s['top_waste']}): {s['remedy']}")
    out += cadence
    if reclaim:
        out.append(reclaim)
    return out
