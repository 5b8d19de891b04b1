"""The drill report: what was found, how each target was reached, the ack, and whether the measured
checkpoint time fits each cloud's notice. Pure: an episode in, a dict and text out."""

from __future__ import annotations

from typing import Any

from agent.checkpoint.episodelog import Episode
from agent.core.vocabulary import DeliveryOutcome, DrillVerdict, EpisodeState
from agent.preemption import registry
from agent.sources.jobs.status import describe as describe_job

TIGHT_RATIO = 0.2  # less headroom than this share of the notice is called tight


def build_report(ep: Episode, detection_seconds: float, provider: str = "") -> dict[str, Any]:
    """``detection_seconds``: how late a real notice reaches the agent (one poll interval and a bit),
    added to the measured checkpoint time before comparing it with each cloud's notice."""
    duration = ep.duration
    clouds = []
    if duration is not None:
        needed = duration + detection_seconds
        for spec in registry.clouds():  # each declared cloud's notice (agent/preemption/clouds/)
            label, notice = spec.notice.label, spec.notice.seconds
            headroom = notice - needed
            clouds.append(
                {
                    "cloud": spec.name,
                    "label": label,
                    "notice_seconds": notice,
                    "needed_seconds": round(needed, 2),
                    "headroom_seconds": round(headroom, 2),
                    "safe": headroom > 0,
                    "tight": 0 < headroom < notice * TIGHT_RATIO,
                }
            )
    verdict, line = _verdict(ep, clouds, provider)
    return {
        "event_id": ep.event_id,
        "kind": ep.kind,
        "provider": ep.provider,
        "drill": ep.drill,
        "dry_run": ep.dry_run,
        "phase": ep.phase,
        "deadline_seconds": round(ep.deadline - (ep.requested_at or ep.received_at), 1),
        "received_at": ep.received_at,  # the notice
        "requested_at": ep.requested_at,  # the request file written, the signals sent right after
        "targets": ep.deliveries,
        "jobs": ep.jobs,
        "channels": ep.channels,
        "problems": ep.problems,
        "ack": ep.ack,
        "duration_seconds": None if duration is None else round(duration, 3),
        "before_deadline": None if ep.ack is None else float(ep.ack["at"]) <= ep.deadline,
        "detection_seconds": detection_seconds,
        "clouds": clouds,
        "verdict": verdict,
        "verdict_line": line,
    }


def _verdict(ep: Episode, clouds: list[dict[str, Any]], provider: str) -> tuple[DrillVerdict, str]:
    if ep.phase == EpisodeState.DRY_RUN:
        reached = [d for d in ep.deliveries if d["outcome"] == DeliveryOutcome.DRY_RUN]
        return DrillVerdict.DRY_RUN, (
            f"dry run: {len(reached)} of {len(ep.deliveries)} target(s) would be signalled; "
            "nothing was sent, so no checkpoint time was measured"
        )
    if ep.phase != EpisodeState.COMPLETED or not clouds:
        why = "no target was found" if not ep.deliveries else "no ack arrived"
        return (
            DrillVerdict.WOULD_LOSE_WORK,
            f"WOULD LOSE WORK: {why} before the deadline; no checkpoint is confirmed",
        )
    own = next((c for c in clouds if c["cloud"] == provider), None)
    unsafe = [c["label"] for c in clouds if not c["safe"]]
    took = f"checkpoint took {ep.duration or 0:.1f} s"
    if own is not None:
        if own["safe"]:
            extra = f" (too slow for {', '.join(unsafe)})" if unsafe else ""
            return (
                DrillVerdict.SAFE,
                f"SAFE on {own['label']}: {took}, {own['headroom_seconds']:.0f} s to spare{extra}",
            )
        return DrillVerdict.WOULD_LOSE_WORK, (
            f"WOULD LOSE WORK on {own['label']}: {took} plus detection, "
            f"{-own['headroom_seconds']:.0f} s too slow"
        )
    if not unsafe:
        return DrillVerdict.SAFE, f"SAFE on every cloud's notice: {took}"
    safe = [c["label"] for c in clouds if c["safe"]]
    if not safe:
        return DrillVerdict.WOULD_LOSE_WORK, f"WOULD LOSE WORK on every cloud's notice: {took}"
    return DrillVerdict.SAFE, f"SAFE on {', '.join(safe)}; WOULD LOSE WORK on {', '.join(unsafe)}: {took}"


def render_report(rep: dict[str, Any], color: bool = False) -> str:
    def paint(text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if color else text

    title = "checkpoint drill" if rep.get("drill") else "checkpoint"
    out = [paint(f"── {title} report: {rep['kind']} ({rep['event_id']}) ──", "1")]
    out.append(
        f"notice: {rep['deadline_seconds']:.0f} s to the deadline" + (" — DRY RUN" if rep["dry_run"] else "")
    )
    targets = rep.get("targets") or []
    for j in rep.get("jobs") or []:
        pids = f": pids {', '.join(map(str, j['pids']))}" if j.get("pids") else ""
        out.append(f"{describe_job(j)}{pids}")
    out.append(f"targets found: {len(targets)}")
    job_of = {p: j for j in rep.get("jobs") or [] for p in j.get("pids") or []}
    for t in targets:
        ok = t["outcome"] in (DeliveryOutcome.SIGNALLED, DeliveryOutcome.DRY_RUN)
        mark = paint("✓", "32") if ok else paint("✗", "31")
        how = f"{t['signal']} {t['outcome']}"
        detail = f" — {t['detail']}" if t.get("detail") else ""
        job = f" in job {job_of[t['pid']]['job_id']}" if t.get("pid") in job_of else ""
        out.append(f"  {mark} pid {t['pid']} ({t['comm']}){job} via {t['source']}: {how}{detail}")
    for name, value in (rep.get("channels") or {}).items():
        out.append(f"  • {name}: {value}")
    for p in rep.get("problems") or []:
        out.append(f"  ! {p}")
    ack = rep.get("ack")
    if ack:
        where = f" at {ack['path']}" if ack.get("path") else ""
        step = f" step {ack['step']}" if "step" in ack else ""
        out.append(f"ack: via {ack['via']}{step}{where}")
        beat = "before" if rep.get("before_deadline") else "AFTER"
        out.append(f"checkpoint time: {rep['duration_seconds']:.2f} s ({beat} the deadline)")
    elif not rep["dry_run"]:
        out.append(paint("ack: none received", "31"))
    if rep.get("clouds"):
        out.append(f"against each cloud's notice (+{rep['detection_seconds']:.1f} s to detect the notice):")
        for c in rep["clouds"]:
            if not c["safe"]:
                mark, word = paint("✗", "31"), f"{-c['headroom_seconds']:.0f} s short"
            elif c["tight"]:
                mark, word = paint("!", "33"), f"{c['headroom_seconds']:.0f} s to spare (tight)"
            else:
                mark, word = paint("✓", "32"), f"{c['headroom_seconds']:.0f} s to spare"
            out.append(f"  {mark} {c['label']:<30} {word}")
    code = {DrillVerdict.SAFE: "1;32", DrillVerdict.WOULD_LOSE_WORK: "1;31"}.get(rep["verdict"], "1;33")
    out.append(paint(f"verdict: {rep['verdict_line']}", code))
    return "\n".join(out)
