"""The classifier as a daemon part: it reads every snapshot, evaluates on schedule, exports the verdict,
shows it in status, and announces sustained verdicts on the event bus for the alerts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

import structlog
from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.classifier import baselines as store
from agent.classifier.baselines import Baselines
from agent.classifier.cause import cause
from agent.classifier.engine import Engine, Evaluation
from agent.classifier.features import Features
from agent.classifier.published import Published, published
from agent.classifier.shapes.checkpoint import save_lines
from agent.classifier.shapes.shape import SaveView
from agent.context import Context
from agent.core.aio import next_within
from agent.core.component import HasMetrics, HasRoutes, HasStatus, HasVerdictLine, Route
from agent.core.events import CheckpointEvent
from agent.core.vocabulary import HostSubReason, Verdict, VerdictReason
from agent.snapshot import NodeSnapshot

log = structlog.get_logger("classifier")


def ago(seconds: float) -> str:
    """`2m13s`: how long a verdict has held (also the durations of `training-node-agent top`)."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class ClassifierComponent(HasMetrics, HasRoutes, HasStatus, HasVerdictLine):
    name = "classifier"

    def __init__(
        self, ctx: Context, peer: Callable[[], str | None] | None = None, saves: SaveView | None = None
    ) -> None:
        self.cfg = ctx.cfg.classifier
        self.peer = peer  # the fleet's word on who sets the job's pace ([fleet], agent/fleet/peer.py)
        self.saves = saves  # the ledger's price and cadence for a save the classifier measured
        self.state_dir = ctx.state_dir
        self.bus = ctx.bus
        self.engine = Engine(self.cfg, store.load(ctx.state_dir))
        self._published: Published | None = None
        self._published_of: tuple[Features | None, Baselines | None] = (None, None)  # what it is of
        self.eval_seconds = 0.0  # cost of the last evaluation
        self._events = ctx.bus.subscribe("classifier", (CheckpointEvent,))
        ctx.snapshot_listeners.append(self.on_snapshot)
        self._saved_at = time.monotonic()

    # --- input -------------------------------------------------------------------------------------

    def on_snapshot(self, snap: NodeSnapshot) -> None:
        t0 = time.perf_counter()
        ev = self.engine.add_snapshot(snap)
        if ev is None:
            return
        self.eval_seconds = time.perf_counter() - t0
        self._announce(ev)

    def _announce(self, ev: Evaluation) -> None:
        if ev.changed and ev.current is not None:
            log.info(
                "bottleneck verdict changed",
                verdict=ev.current.label,
                previous=self.engine.previous,
                reasons=list(ev.current.reasons),
            )
        for event in ev.events:
            self.bus.publish(event)

    async def run(self) -> None:
        while True:
            ev = await next_within(self._events, self.cfg.save_every)
            if isinstance(ev, CheckpointEvent):
                self.engine.checkpoint(ev.phase, ev.event_id, time.monotonic())
            if time.monotonic() - self._saved_at >= self.cfg.save_every:
                await self._save()

    async def _save(self) -> None:
        self._saved_at = time.monotonic()
        self.engine.settle()
        if not self.engine.baselines_dirty:
            return
        self.engine.baselines_dirty = False
        try:
            await asyncio.to_thread(store.save, self.state_dir, self.engine.baselines)
        except OSError as e:
            self.engine.baselines_dirty = True
            log.warning("cannot save classifier baselines", dir=str(self.state_dir), error=e.strerror)

    async def stop(self) -> None:
        self.engine.baselines_dirty = True  # always leave the latest picture behind
        await self._save()

    # --- faces -------------------------------------------------------------------------------------

    def published(self) -> Published:
        """What the goodput ledger books waiting GPUs by: the sorting by the baselines as learned, and
        the latest window's pressures (made anew only when either changes, not every tick)."""
        last = self.engine.last
        features, baselines = (last.vote.features if last else None), self.engine.baselines
        p = self._published
        if p is None or self._published_of[0] is not features or self._published_of[1] is not baselines:
            p = self._published = published(baselines, features, self.cfg)
            self._published_of = (features, baselines)
        return p

    def _reasons(self) -> list[str]:
        """The verdict's reasons; a sync-wait one adds whom it waits for, where the fleet says."""
        cur = self.engine.current
        if cur is None:
            return []
        out = list(cur.reasons)
        note = self.peer() if self.peer is not None and cur.verdict == Verdict.SYNC_WAIT else None
        if note:
            out.insert(2, note)
        if self.saves is not None and cur.sub_reason == HostSubReason.CHECKPOINT:
            out += save_lines(cur.features.host, self.saves)
        return out

    def verdict_line(self) -> str:
        e = self.engine
        cur = e.current
        if cur is None:
            return "verdict pending"
        held = e.last.held if e.last else None
        text = f"{cur.label} for {ago(time.monotonic() - (e.since_mono or time.monotonic()))}"
        note = self.peer() if self.peer is not None and cur.verdict == Verdict.SYNC_WAIT else None
        if note:
            text += f": {note}"
        elif cur.verdict not in (Verdict.IDLE, Verdict.MIXED) and len(cur.reasons) > 1:
            text += f": {cur.reasons[1]}"
        return text + (f" ({held})" if held else "")

    def status(self) -> dict[str, Any]:
        e = self.engine
        cur = e.current
        last = e.last
        out: dict[str, Any] = {
            "verdict": cur.verdict if cur else None,
            "sub_reason": cur.sub_reason if cur else None,
            "since": e.since_wall,
            "since_seconds": round(time.monotonic() - e.since_mono, 1) if e.since_mono else None,
            "reasons": self._reasons(),
            "hint": cur.hint if cur else "",
            "health": list(cur.health) if cur else [],
            "scores": dict(last.vote.scores) if last else {},
            "vote": last.vote.label if last else None,
            "held": last.held if last else None,
            "candidate": e.candidate,
            "candidate_count": e.count,
            "changes_total": e.changes_total,
            "evaluations": e.evaluations,
            "evaluation_seconds": round(self.eval_seconds, 6),
            "window_seconds": self.cfg.window,
            "window_samples": len(e.window()),
            "published": e.published is not None,
            "learned": e.baselines.to_json(),
        }
        out["lines"] = self._lines(out)
        return out

    def _lines(self, st: dict[str, Any]) -> list[str]:
        e = self.engine
        cur = e.current
        if cur is None:
            why = st["held"] or "waiting for the first evaluation"
            return [f"verdict: pending ({why}; window {st['window_samples']} samples)"]
        lines = [f"verdict: {cur.label.upper()} for {ago(st['since_seconds'] or 0)}"]
        if st["held"]:
            lines[0] += f"  (held: {st['held']})"
        lines += [f"  - {r}" for r in self._reasons()]
        lines.append(f"hint: {cur.hint}")
        for h in cur.health:
            lines.append(f"GPU health: {h}")
        scores = "  ".join(f"{k} {v:.2f}" for k, v in st["scores"].items())
        lines.append(f"scores: {scores}  (this window votes {st['vote']})")
        return lines

    def metrics(self) -> Iterable[Metric]:
        e = self.engine
        cur = e.current.verdict if e.current else None
        state = GaugeMetricFamily(
            "training_node_bottleneck",
            "The node's bottleneck verdict in force: 1 for the current class, 0 for the others.",
            labels=["class"],
        )
        score = GaugeMetricFamily(
            "training_node_bottleneck_score",
            "Score 0-1 of each bottleneck class in the latest evaluation window.",
            labels=["class"],
        )
        scores = e.last.vote.scores if e.last else {}
        for cls in Verdict:
            state.add_metric([cls], 1.0 if cls == cur else 0.0)
            if cls in scores:
                score.add_metric([cls], scores[cls])
        yield state
        yield score
        # the verdict and its top reason as words, for the fleet rules that name a job's straggler;
        # one series, absent before the first verdict
        info = GaugeMetricFamily(
            "training_node_verdict_info",
            "The verdict in force and its top reason in one stable word (value 1).",
            labels=["class", "reason"],
        )
        if e.current is not None:
            info.add_metric([e.current.verdict, cause(e.current)], 1.0)
        yield info
        # the GPUs the verdict names as setting the pace, with the clocks event reason they ran under
        # most ("none": look at their links and power limit); the fleet's straggler alert quotes them
        slow = GaugeMetricFamily(
            "training_node_gpu_slow",
            "1 for a GPU that works while its peers wait for it in collectives (verdict reason"
            " degraded-gpu), with the clocks event reason it ran under most.",
            labels=["gpu", "reason"],
        )
        if e.current is not None and cause(e.current) == VerdictReason.DEGRADED_GPU:
            for x in e.current.features.slow_gpus:
                slow.add_metric([str(x.gpu), x.under[0][0] if x.under else "none"], 1.0)
        yield slow
        changes = CounterMetricFamily(
            "training_node_bottleneck_changes", "Times the bottleneck verdict changed class."
        )
        changes.add_metric([], float(e.changes_total))
        yield changes

    def control_routes(self) -> list[Route]:
        return [("GET", "/classifier/history", self._history)]

    async def _history(self, request: web.Request) -> web.Response:
        n = request.query.get("n")
        items = list(self.engine.recent(int(n) if n and n.isdigit() else None))
        return web.json_response({"evaluations": items, "total": self.engine.evaluations})
