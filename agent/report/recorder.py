"""The report's part: keeps the timeline (``timeline.py``) from every snapshot and the bus' notices,
checkpoints, GPU faults and verdict changes, saves it in ``state_dir`` (written whole; a damaged file
is set aside as ``.bad`` and the timeline starts empty), and makes the page: ``GET /report`` on the
control socket (``report --html``) and, through the daemon, ``/report`` on the metrics port.
"""

from __future__ import annotations

import asyncio
import math
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from agent import __version__
from agent.context import Context
from agent.core.aio import next_within
from agent.core.component import HasRoutes, Route
from agent.core.events import CheckpointEvent, Event, GpuFaultEvent, PreemptionEvent
from agent.core.statefile import load_json, save_state
from agent.core.vocabulary import CHECKPOINT_ENDS, CheckpointPhase
from agent.ledger.component import LedgerComponent
from agent.report.timeline import GpuPoint, Mark, MarkKind, Point, Timeline
from agent.snapshot import NodeSnapshot
from agent.sources.gpu.part import GpuPart, kernel_share
from agent.sources.network.rates import NetworkRates
from agent.sources.storage.rates import StorageRates

log = structlog.get_logger("report")

FILE_NAME = "report-timeline.json"
SAVE_EVERY = 60.0
FRESH = 5.0  # seconds a page made is served again to the same question

# the classifier's verdict now, as words ("data/cpu"), or None before its first; handed in by the daemon
VerdictView = Callable[[], str | None]
# the instance advice (agent/advice/'s JSON shape) for the page's last section, where there is one
AdviceView = Callable[[str | None], dict[str, Any] | None]  # for the job asked about (None: the node)


def point(snap: NodeSnapshot, seconds: float, verdict: str | None) -> Point:
    """One tick as a timeline point."""
    gpus: list[GpuPoint] = []
    part = snap.part(GpuPart)
    for g in part.gpus if part is not None else ():
        work = g.sm_active if g.sm_active is not None else g.tensor_active
        gpus.append(
            GpuPoint(
                work, kernel_share(g), g.memory_used_bytes, g.memory_total_bytes, g.clocks_event_reasons or 0
            )
        )
    storage = snap.rates.of(StorageRates)
    net = snap.rates.of(NetworkRates)
    io: list[float | None] = [
        sum(storage.disk_read.values()) if storage.disk_read else None,
        sum(storage.nfs_read.values()) if storage.nfs_read else None,
        sum(net.nic_rx.values()) if net.nic_rx else None,
        sum(net.rdma_rx.values()) if net.rdma_rx else None,
    ]
    return Point(snap.timestamp, seconds, verdict, gpus, io)


def mark_of(ev: Event) -> Mark | None:
    """The mark a bus event puts on the timeline, if any."""
    if isinstance(ev, PreemptionEvent):
        if ev.withdrawn or ev.replayed:
            return None
        label = f"{ev.kind} notice" + (" (drill)" if ev.drill else "")
        return Mark(ev.received_at.timestamp(), MarkKind.RECLAIM, label, f"{ev.provider} {ev.event_id}")
    if isinstance(ev, CheckpointEvent):
        if ev.phase not in CHECKPOINT_ENDS or ev.phase == CheckpointPhase.CANCELED:
            return None
        label = f"final checkpoint {ev.phase}" + (" (drill)" if ev.drill else "")
        took = f"took {ev.duration_seconds:.1f} s" if ev.duration_seconds is not None else ""
        return Mark(ev.at.timestamp(), MarkKind.CHECKPOINT, label, took)
    if isinstance(ev, GpuFaultEvent):
        if ev.cleared:
            return None
        what = f"xid {ev.xid}" if ev.xid is not None else str(ev.fault)
        return Mark(ev.at.timestamp(), MarkKind.GPU_FAULT, f"GPU {ev.gpu_name}: {what}", ev.detail)
    return None


def load(state_dir: Path) -> Timeline:
    loaded = load_json(
        state_dir / FILE_NAME, Timeline.from_json, log, what="the report timeline", instead="starting empty"
    )
    return loaded if loaded is not None else Timeline()


def save(state_dir: Path, text: str) -> None:
    save_state(state_dir / FILE_NAME, text)


class ReportRecorder(HasRoutes):
    name = "report"

    def __init__(
        self,
        ctx: Context,
        ledger: LedgerComponent,
        verdict: VerdictView | None = None,
        advice: AdviceView | None = None,
    ) -> None:
        self.state_dir = ctx.state_dir
        self.ledger = ledger
        self.verdict = verdict
        self.advice = advice
        self.keep = ctx.cfg.goodput.keep
        self.timeline = load(ctx.state_dir)
        self.node = socket.gethostname()
        self._events = ctx.bus.subscribe("report", (PreemptionEvent, CheckpointEvent, GpuFaultEvent))
        self._prev: float | None = None
        self._said: str | None = self.timeline.fine[-1].verdict if self.timeline.fine else None
        self._last_save = max((t for t, _ in ledger.ledger.saves), default=0.0)
        self._making = asyncio.Lock()
        self._pages: dict[tuple[int, str | None, bool], tuple[float, str]] = {}  # the last page made
        ctx.snapshot_listeners.append(self.on_snapshot)

    def on_snapshot(self, snap: NodeSnapshot) -> None:
        prev, self._prev = self._prev, snap.monotonic
        if prev is None or snap.monotonic <= prev:
            return
        said = self.verdict() if self.verdict else None
        if said is not None and said != self._said:
            self.timeline.mark(Mark(snap.timestamp, MarkKind.VERDICT, said, f"was {self._said or 'pending'}"))
            self._said = said
        self.timeline.add(point(snap, snap.monotonic - prev, said))
        # the trainer's periodic checkpoints reach the ledger from its report files, not the bus
        for t, took in self.ledger.ledger.saves:
            if t > self._last_save:
                self._last_save = t
                self.timeline.mark(
                    Mark(
                        t, MarkKind.CHECKPOINT, "checkpoint", f"took {took:.1f} s" if took is not None else ""
                    )
                )

    async def run(self) -> None:
        due = time.monotonic() + SAVE_EVERY
        while True:
            ev = await next_within(self._events, max(0.0, due - time.monotonic()))
            if ev is not None:
                m = mark_of(ev)
                if m is not None:
                    self.timeline.mark(m)
            if time.monotonic() >= due:
                due = time.monotonic() + SAVE_EVERY
                await self._save()

    async def _save(self) -> None:
        text = self.timeline.to_text()  # on the loop: only the minute's new points become text
        try:
            await asyncio.to_thread(save, self.state_dir, text)
        except OSError as e:
            log.warning("cannot save the report timeline", dir=str(self.state_dir), error=e.strerror)

    async def stop(self) -> None:
        await self._save()

    async def page(self, since: float | None = None, job: str | None = None, network: bool = False) -> str:
        """The page over the last ``since`` seconds (default a day), for the node or ``job``: the
        data taken here, on the loop, the HTML made in a thread. ValueError: a bad period or job.
        ``network``: for the metrics port, with no more than the TCP status shows (``gather``)."""
        # the page's builder is imported by the first page, not by the daemon's start
        from agent.report.gather import page_data
        from agent.report.page import build_page

        window = 86400.0 if since is None else since
        if not 0 < window <= self.keep or not math.isfinite(window):
            raise ValueError(f"since must be between 0 and {self.keep:.0f} seconds")
        key = (round(window), job, network)
        # one page made at a time, and one asked again within FRESH seconds is the same page: a week's
        # page is a fifth of a second of CPU, and /report is on the network
        async with self._making:
            kept = self._pages.get(key)
            if kept is not None and time.monotonic() - kept[0] < FRESH:
                return kept[1]
            data = page_data(
                self.ledger, self.timeline, time.time(), window, self.node, __version__, job, network
            )
            advice = self.advice(job) if self.advice is not None else None
            html = await asyncio.to_thread(build_page, data, advice)
            self._pages = {key: (time.monotonic(), html)}
            return html

    def control_routes(self) -> list[Route]:
        return [("GET", "/report", self._get)]

    async def _get(self, request: web.Request) -> web.Response:
        since = request.query.get("since")
        html = await self.page(float(since) if since else None, request.query.get("job") or None)
        return web.Response(text=html, content_type="text/html")
