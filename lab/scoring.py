"""Scoring the agent's evaluations against what the synthetic trainer really did (pure functions).

- Every evaluation whose window is past the warm-up and the *detection allowance* (the first
  ``allowance`` evaluations after each regime change, which a windowed classifier cannot get right
  by construction; or, where a shape's own bar grants longer, the evaluations within
  ``allowance_seconds`` of the change, of the job's start for the first) is scored in the
  confusion matrix.
- Each regime change (and each job start, counted from the end of the warm-up) is *detected* at
  the first evaluation whose verdict is the new regime's; its latency is counted in evaluations and
  seconds. The evaluations counted are those whose window is mostly the new regime: one taken 0.1 s
  after a change has seen a tenth of it, and no window classifier can name it there.
- A *spin-wait window* is an evaluation window in which the GPUs spent more time spinning than
  computing (from the trainer's phase log, time-weighted); none of them may be called ``compute``.
- The *time to first verdict* is from the job's start (its first regime) to the first evaluation
  whose verdict is right and not held from before, warm-up, window filling and confirmations
  included; *held after it* is the share of the job's later evaluations that are right too (a
  verdict named once and lost is not one an operator can act on).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

TRUTH = {
    "compute": "compute",
    "storage": "data/storage",
    "cpu": "data/cpu",
    "network-input": "data/network-input",  # input streamed over the NIC (object storage), not a collective
    "network": "network",
    "sync-wait": "sync-wait",
    "checkpoint": "compute",  # write bursts and checkpoints must not flip a compute-bound job
    "idle": "idle",
    # the host side (issue 48, lab/hostdraws.py): a synchronous save that holds the GPUs a third of the time
    "launch": "host/launch",
    "pageable-copy": "host/pageable-copy",
    "checkpoint-stall": "host/checkpoint",
}
ROWS = (
    "compute",
    "data/storage",
    "data/cpu",
    "data/network-input",
    "network",
    "sync-wait",
    "host/launch",
    "host/pageable-copy",
    "host/checkpoint",
    "idle",
)
COLUMNS = (*ROWS, "mixed", "none")
CARRIED = ("warming up", "filling window")  # holds that keep the verdict from before the job


@dataclass
class Change:
    at: float  # wall time from which the new regime is to be detected
    before: str
    after: str
    latency_evaluations: int | None = None  # None: not detected within the run
    latency_seconds: float | None = None
    # not named within the allowance: the first evaluations after it, on one line (a CI summary
    # shows an assertion's first line)
    seen: str = ""


@dataclass
class Result:
    name: str
    family: str = ""
    first_verdict_seconds: float | None = None  # job start -> first right verdict; None: never
    after_first: tuple[int, int] = (
        0,
        0,
    )  # the job's evaluations after its first right verdict: (right, total)
    confusion: Counter[tuple[str, str]] = field(default_factory=Counter)
    changes: list[Change] = field(default_factory=list)
    spin_windows: int = 0
    spin_called_compute: list[float] = field(default_factory=list)
    evaluations: int = 0
    # every evaluation after the warm-up, the detection allowance included: (right, total)
    all_right: int = 0
    all_total: int = 0
    held: Counter[str] = field(default_factory=Counter)
    trace: list[str] = field(default_factory=list)  # each evaluation of the run, for a failure's message
    phases: list[tuple[float, str]] = field(default_factory=list)  # the job's own, for checking the truth

    @property
    def scored(self) -> int:
        return sum(self.confusion.values())

    @property
    def right(self) -> int:
        return sum(n for (t, v), n in self.confusion.items() if t == v)

    @property
    def accuracy(self) -> float:
        return self.right / self.scored if self.scored else 0.0

    @property
    def held_after_first(self) -> float | None:
        right, total = self.after_first
        return right / total if total else None


def segments_from_log(lines: list[dict[str, Any]]) -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
    """(regime starts, phase changes) from the trainer's JSON lines, each as (wall, name)."""
    regimes = [(x["wall"], x["regime"]) for x in lines if "seconds" in x]
    phases = [(x["wall"], x["phase"]) for x in lines if "phase" in x]
    return regimes, phases


def phase_shares(phases: list[tuple[float, str]], start: float, end: float) -> dict[str, float]:
    """Time share of each GPU phase within [start, end]."""
    out: dict[str, float] = {}
    current = "idle"
    t = start
    for at, name in phases:
        if at <= start:
            current = name
            continue
        if at >= end:
            break
        out[current] = out.get(current, 0.0) + at - t
        current, t = name, at
    out[current] = out.get(current, 0.0) + end - t
    span = max(end - start, 1e-9)
    return {k: v / span for k, v in out.items()}


def score(
    name: str,
    evaluations: list[dict[str, Any]],
    regimes: list[tuple[float, str]],
    phases: list[tuple[float, str]],
    start: float,
    end: float,
    window: float,
    warmup: float,
    allowance: int = 3,
    before: str | None = None,
    family: str = "",
    truth: dict[str, str] | None = None,
    allowance_seconds: float = 0.0,
) -> Result:
    """``regimes`` empty: no job ran between ``start`` and ``end`` (the truth is idle throughout).
    ``before`` is the verdict expected just before ``start`` (the previous scenario's); ``truth``:
    regime -> verdict where this job's is not ``TRUTH``'s (a compute job with a second cause);
    ``allowance_seconds``: the shape's own bar for naming it (a save every 10-20 s: 60 s), where it
    grants more than ``allowance`` evaluations."""
    labels = {**TRUTH, **(truth or {})}
    res = Result(name, family or name, phases=list(phases))
    evs = [e for e in evaluations if start < e["at"] <= end]
    res.evaluations = len(evs)
    if regimes:
        job_start = regimes[0][0]
        # the agent sees the job a sampling interval or so after it starts: its own warm-up ends with
        # the last evaluation it held for warming up
        warm = [e["at"] for e in evs if e.get("held") == "warming up" and e["at"] >= job_start]
        warm_end = max(warm) if warm else job_start + warmup
        bounds = [(warm_end, before or "idle", labels[regimes[0][1]])]
        for (t, r), (_, prev) in zip(regimes[1:], regimes, strict=False):
            if labels[r] != labels[prev]:
                bounds.append((t, labels[prev], labels[r]))
    else:
        job_start = start
        bounds = [(start, before or "idle", "idle")]
    res.changes = [Change(at, b, a) for at, b, a in bounds]
    # each change's bar, from the job's start for the first (warm-up included, as the shape's bar is)
    granted = {
        id(ch): (job_start if k == 0 else ch.at) + allowance_seconds for k, ch in enumerate(res.changes)
    }

    def truth_at(t: float) -> str:
        if not regimes:
            return "idle"
        label = labels[regimes[0][1]]
        for at, r in regimes:
            if at <= t:
                label = labels[r]
        return label

    if regimes:
        first = labels[regimes[0][1]]
        # a verdict held for warming up or filling the window is the one before the job, carried: the
        # previous job's, when it had the same label
        hit = next(
            (
                e
                for e in evs
                if e["at"] >= job_start and e["verdict"] == first and e.get("held") not in CARRIED
            ),
            None,
        )
        res.first_verdict_seconds = round(hit["at"] - job_start, 2) if hit else None
        if hit:
            later = [e for e in evs if e["at"] > hit["at"]]
            res.after_first = (sum(truth_at(e["at"]) == e["verdict"] for e in later), len(later))
    for ch in res.changes:
        after = [e for e in evs if e["at"] > ch.at + window / 2]
        for k, e in enumerate(after, 1):
            if e["verdict"] == ch.after:
                ch.latency_evaluations = k
                ch.latency_seconds = round(e["at"] - ch.at, 2)
                break
        late = ch.latency_seconds is None or ch.at + ch.latency_seconds > granted[id(ch)]
        if ch.latency_evaluations is None or (ch.latency_evaluations > allowance and late):
            ch.seen = _brief(after[: allowance + 1])
    t0 = regimes[0][0] if regimes else start
    res.trace = [
        f"{e['at'] - t0:+6.2f}s {e['verdict']} (vote {e['vote']}"
        + (f", held: {e['held']}) " if e.get("held") else ") ")
        + " ".join(f"{k}={v:.2f}" for k, v in e.get("scores", {}).items())
        + "".join(f"\n          {r}" for r in e.get("reasons", ()))
        for e in evs
    ]
    for e in evs:
        verdict = e["verdict"] or "none"
        if e.get("held"):
            res.held[e["held"]] += 1
        if regimes:
            shares = phase_shares(phases, e["at"] - window, e["at"])
            if shares.get("spin", 0.0) > shares.get("compute", 0.0):
                res.spin_windows += 1
                if verdict == "compute":
                    res.spin_called_compute.append(e["at"])
        if regimes and e["at"] <= warm_end:
            continue  # warm-up
        truth = truth_at(e["at"])
        res.all_total += 1
        res.all_right += truth == verdict
        recent = [ch for ch in res.changes if ch.at < e["at"]]
        if recent:
            since = [x for x in evs if recent[-1].at < x["at"] <= e["at"]]
            if len(since) <= allowance or e["at"] <= granted[id(recent[-1])]:
                continue  # inside the detection allowance of the latest change
        res.confusion[(truth, verdict)] += 1
    return res


def _brief(evs: list[dict[str, Any]], width: int = 900) -> str:
    """Each evaluation as its verdict, vote and scores, and its vote's reasons that carry numbers."""
    parts = []
    for e in evs:
        scores = ",".join(f"{k[:4]}={v:.2f}" for k, v in e.get("scores", {}).items() if v)
        why = "; ".join(r[:110] for r in e.get("reasons", ()) if any(c.isdigit() for c in r))
        parts.append(f"[{e['verdict']}/{e['vote']} {scores} {why}]")
    return " ".join(parts)[:width]


def first_verdicts(results: list[Result]) -> list[str]:
    """Time to the first right verdict per scenario family: median and worst, seconds; and the share
    of the evaluations after it that were right, over the family's runs."""
    fams: dict[str, list[Result]] = {}
    for r in results:
        if r.changes and r.family != "idle":
            fams.setdefault(r.family, []).append(r)
    lines = [
        "time to first right verdict from the job's start (family: runs, median, worst; s), "
        "and the evaluations after it that were right"
    ]
    for fam, rs in sorted(fams.items()):
        got = sorted(r.first_verdict_seconds for r in rs if r.first_verdict_seconds is not None)
        missing = len(rs) - len(got)
        med = f"{got[len(got) // 2]:.2f}" if got else "-"
        worst = f"{got[-1]:.2f}" if got else "-"
        right, total = (sum(r.after_first[k] for r in rs) for k in (0, 1))
        held = f"held {right}/{total} ({right * 100 / total:.0f}%)" if total else "held -"
        lines.append(
            f"  {fam:<28} {len(rs):>3}  {med:>6}  {worst:>6}  {held}"
            + (f"  ({missing} never)" if missing else "")
        )
    return lines


def render(results: list[Result]) -> str:
    total: Counter[tuple[str, str]] = Counter()
    for r in results:
        total.update(r.confusion)
    width = max(len(c) for c in COLUMNS) + 1
    lines = ["confusion matrix (rows: what the trainer did; columns: the agent's verdict)", ""]
    lines.append(
        f"{'truth / verdict':<16}" + "".join(f"{c:>{width}}" for c in COLUMNS) + f"{'right':>{width}}"
    )
    for row in ROWS:
        n = sum(total[(row, c)] for c in COLUMNS)
        if not n:
            continue
        cells = "".join(f"{total[(row, c)]:>{width}}" for c in COLUMNS)
        lines.append(f"{row:<16}{cells}{total[(row, row)] * 100 / n:>{width - 1}.1f}%")
    scored = sum(total.values())
    right = sum(n for (t, v), n in total.items() if t == v)
    lines.append("")
    lines.append(
        f"evaluations scored after warm-up: {scored}, right: {right} ({right * 100 / max(scored, 1):.1f}%)"
    )
    all_right = sum(r.all_right for r in results)
    all_total = sum(r.all_total for r in results)
    lines.append(
        f"counting the detection allowance after each change too: {all_right} of {all_total} right "
        f"({all_right * 100 / max(all_total, 1):.1f}%)"
    )
    lines.append("")
    lines.append(
        "regime changes: detection latency (evaluations after the change; "
        "a job start counts from the end of its warm-up; a window at least half the new regime counts)"
    )
    for r in results:
        for ch in r.changes:
            lat = (
                f"{ch.latency_evaluations} evaluations, {ch.latency_seconds:.2f} s"
                if ch.latency_evaluations is not None
                else "NOT DETECTED"
            )
            lines.append(f"  {r.name:<18} {ch.before:>13} -> {ch.after:<13} {lat}")
    lines.append("")
    lines += first_verdicts(results)
    lines.append("")
    lines.append("per scenario: scored / right / accuracy, spin-wait windows (called compute), holds")
    for r in results:
        held = ", ".join(f"{k} {v}" for k, v in sorted(r.held.items())) or "-"
        lines.append(
            f"  {r.name:<18} {r.scored:>3} / {r.right:>3} / {r.accuracy * 100:5.1f}%   "
            f"spin windows {r.spin_windows:>3} ({len(r.spin_called_compute)})   held: {held}"
        )
    return "\n".join(lines)
