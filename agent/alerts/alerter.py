"""The alerts component: events from the bus -> dedup, hold, resolve, remind -> per-channel delivery.

- A condition that stays until it clears (a bottleneck verdict, a lost GPU, a failing collector) is
  sent once, reminded every ``repeat_interval`` while active, and resolved when its clearing event
  comes. One-shot alerts (an Xid, a checkpoint step) with the same fingerprint inside
  ``repeat_interval`` are duplicates. Duplicates are counted as dropped with reason ``duplicate``.
- Every message carries the node (hostname, and the cloud's instance id, type and region once the
  watcher has published them) and the GPUs concerned (from the latest snapshot).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.alerts.connect import build_channel
from agent.alerts.delivery import Delivery
from agent.alerts.facts import Facts
from agent.alerts.kinds import KINDS, facts, render
from agent.alerts.message import Message, NodeIdentity
from agent.alerts.render import reminder
from agent.alerts.scene import Scene, gpu_inventory, job_inventory
from agent.alerts.services.base import Channel
from agent.alerts.spool import Spool
from agent.context import Context
from agent.core.aio import wait_within
from agent.core.component import HasMetrics, HasStatus
from agent.core.events import (
    Event,
    InstanceIdentityEvent,
    PreemptionEvent,
)
from agent.core.zones import zone

log = structlog.get_logger("alerts")

SPOOL_FILE = "alerts.sqlite3"
# the node's identity (for the scene), and every kind of event alerts say something of
EVENT_TYPES: tuple[type[Event], ...] = (InstanceIdentityEvent, *KINDS)


@dataclass
class Active:
    facts: Facts
    messages: dict[str, Message]  # language -> the firing message
    channels: list[str]
    last_sent: float


@dataclass
class Held:
    due: float
    event: Event
    facts: Facts


class Alerter(HasMetrics, HasStatus):
    name = "alerts"

    def __init__(
        self,
        ctx: Context,
        clock: Callable[[], float] = time.monotonic,
        job_losses: Callable[[], dict[str, float]] | None = None,
    ) -> None:
        self.ctx = ctx
        self.job_losses = job_losses  # the ledger's view: what a reclaim now would cost each job
        self.section = ctx.cfg.alerts
        self.tz = zone(self.section.timezone)
        self._clock = clock
        # subscribe now: the daemon publishes "started" right after building the parts
        self._queue = ctx.bus.subscribe("alerts", EVENT_TYPES)
        self.hostname = socket.gethostname()
        self.identity: InstanceIdentityEvent | None = None
        self.spool_error: str | None = None
        self.spool = self._open_spool(Path(ctx.state_dir) / SPOOL_FILE)
        self._http: aiohttp.ClientSession | None = None
        self.deliveries: dict[str, Delivery] = {}
        for cfg in self.section.webhooks:
            channel: Channel | None = None
            error = None
            try:
                channel = build_channel(cfg)
                log.info(
                    "alert channel",
                    channel=cfg.name,
                    type=cfg.type,
                    url=channel.redacted_url(),
                    style=channel.style,
                    signed=channel.secret is not None,
                )
            except ValueError as e:
                error = str(e)
                log.error("alert channel unusable", channel=cfg.name, type=cfg.type, error=error)
            self.deliveries[cfg.name] = Delivery(
                cfg, self.section, self.spool, self.session, channel, error, clock
            )
        for d in self.deliveries.values():
            d.recover()
        self.orphaned: dict[str, int] = {}
        for name, count in self.spool.channels().items():
            if name not in self.deliveries:
                # a channel removed from the config: its alerts have nowhere to go
                self.spool.drop_channel(name)
                self.orphaned[name] = count
                log.warning(
                    "dropped spooled alerts of a channel no longer configured", channel=name, alerts=count
                )
        self.active: dict[str, Active] = {}
        self.recent: dict[str, float] = {}  # one-shot fingerprint -> when last sent
        self.held: dict[str, Held] = {}
        self._tick_wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False

    def _open_spool(self, path: Path) -> Spool:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return Spool(path)
        except Exception as e:  # a broken state dir must not take the daemon down: keep alerts in memory
            self.spool_error = f"cannot open {path}: {type(e).__name__}: {e}; alerts are kept in memory only"
            log.error("alert spool unavailable", error=self.spool_error)
            return Spool(":memory:")

    def session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(headers={"User-Agent": "training-node-agent"})
        return self._http

    # --- events ------------------------------------------------------------------------------------

    def scene(self) -> Scene:
        ident = self.identity
        node = NodeIdentity(
            hostname=self.hostname,
            instance_id=ident.instance_id if ident else None,
            instance_type=ident.instance_type if ident else None,
            region=ident.region if ident else None,
            zone=ident.zone if ident else None,
            provider=ident.provider if ident else None,
        )
        snap = self.ctx.latest()
        try:
            losses = self.job_losses() if self.job_losses else None
        except Exception:  # the ledger's view failing must not cost the alert
            log.exception("cannot read the jobs' losses from the ledger")
            losses = None
        jobs = job_inventory(snap, losses)
        return Scene(node, gpu_inventory(snap), self.tz, datetime.now(UTC), os.getpid(), jobs)

    def handle(self, event: Event) -> None:
        if self._closed:
            return
        if isinstance(event, InstanceIdentityEvent):
            self.identity = event
            return
        if isinstance(event, PreemptionEvent) and event.replayed:
            # a notice restored after a restart or reload was alerted when it first came (the spool
            # keeps what was not delivered yet); saying it again at every reload floods the chat
            return
        f = facts(event)
        if f is None:
            return
        if f.held and self.section.verdict_hold > 0:
            if f.resolved:
                if self.held.pop(f.fingerprint, None) is not None:
                    return  # came and went within the hold: never said, nothing to resolve
            elif f.fingerprint not in self.active:
                self.held.setdefault(f.fingerprint, Held(self._clock() + self.section.verdict_hold, event, f))
                self._tick_wake.set()
                return
        self.dispatch(event, f)

    def dispatch(self, event: Event, f: Facts) -> None:
        now = self._clock()
        if f.resolved:
            entry = self.active.pop(f.fingerprint, None)
            if entry is None or not self.section.send_resolved:
                return
            targets = [self.deliveries[n] for n in entry.channels if n in self.deliveries]
        else:
            targets = [d for d in self.deliveries.values() if d.accepts(f.kind, f.severity)]
            duplicate = (
                f.fingerprint in self.active
                if f.sustained
                else now - self.recent.get(f.fingerprint, -1e18) < self.section.repeat_interval
            )
            if duplicate:
                for d in targets:
                    d.dropped["duplicate"] += 1
                return
            if not f.sustained:
                self._remember(f.fingerprint, now)
        scene = self.scene()
        rendered: dict[str, Message] = {}
        for d in targets:
            if d.language not in rendered:
                try:
                    rendered[d.language] = render(event, f, scene, d.language)
                except Exception:
                    log.exception("cannot render alert", fingerprint=f.fingerprint, channel=d.name)
                    d.dropped["render_error"] += 1
                    continue
            d.enqueue(rendered[d.language])
        if f.sustained and not f.resolved and targets:
            self.active[f.fingerprint] = Active(f, rendered, [d.name for d in targets], now)
            self._tick_wake.set()

    def _remember(self, fingerprint: str, now: float) -> None:
        self.recent[fingerprint] = now
        if len(self.recent) > 10_000:  # forget the ones outside the dedup window
            horizon = now - self.section.repeat_interval
            self.recent = {k: v for k, v in self.recent.items() if v >= horizon}

    def tick(self) -> float:
        """Release held verdicts that lasted, remind active conditions; returns seconds to the next due."""
        now = self._clock()
        for fp, h in list(self.held.items()):
            if h.due <= now:
                del self.held[fp]
                self.dispatch(h.event, h.facts)
        repeat = self.section.repeat_interval
        for a in self.active.values():
            if now - a.last_sent >= repeat:
                a.last_sent = now
                for name in a.channels:
                    d = self.deliveries.get(name)
                    if d is not None and d.language in a.messages:
                        d.enqueue(reminder(a.messages[d.language], self.tz))
        dues = [h.due for h in self.held.values()] + [a.last_sent + repeat for a in self.active.values()]
        return max(0.01, min(dues, default=now + 3600) - now)

    # --- loops -------------------------------------------------------------------------------------

    def _handle_safely(self, event: Event) -> None:
        try:
            self.handle(event)
        except Exception:  # one bad event must not stop the alerts
            log.exception("alert handling failed", event=type(event).__name__)

    async def _consume(self) -> None:
        while True:
            self._handle_safely(await self._queue.get())

    async def _ticker(self) -> None:
        while True:
            wait = self.tick()
            self._tick_wake.clear()
            await wait_within(self._tick_wake, min(wait, 3600))

    async def run(self) -> None:
        self._tasks = [asyncio.create_task(self._consume(), name="alerts-events")]
        self._tasks.append(asyncio.create_task(self._ticker(), name="alerts-ticker"))
        for d in self.deliveries.values():
            self._tasks.append(asyncio.create_task(d.run(), name=f"alerts-{d.name}"))
        try:
            await asyncio.gather(*self._tasks)
        finally:
            await self._cancel_tasks()

    async def _cancel_tasks(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        """Take what the bus already delivered (the "stopping" notice among it), then flush the queues
        until ``flush_timeout``; whatever is left stays spooled for the next start."""
        if self._closed:
            return
        await self._cancel_tasks()
        while not self._queue.empty():
            self._handle_safely(self._queue.get_nowait())
        deadline = self._clock() + self.section.flush_timeout
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.section.flush_timeout + 0.2):
                await asyncio.gather(
                    *(d.flush(deadline) for d in self.deliveries.values()), return_exceptions=True
                )
        # a request still out (the flush ran out of time) gets its answer before the session
        # closes under it: an answer lost there would leave nobody knowing what the service has
        out = [f for d in self.deliveries.values() if (f := d.in_flight()) is not None]
        if out:
            await asyncio.wait(out, timeout=max(d.timeout for d in self.deliveries.values()))
        left = self.spool.channels()
        if left:
            log.info("undelivered alerts stay spooled for the next start", queued=left)
        self._closed = True
        if self._http is not None:
            await self._http.close()
        self.spool.close()

    # --- faces -------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        if self._closed:
            return {"state": "stopped", "lines": ["stopped"]}
        channels = {name: d.status() for name, d in self.deliveries.items()}
        lines = [d.line() for d in self.deliveries.values()]
        if self.spool_error:
            lines.append(f"spool: {self.spool_error}")
        if self.active:
            lines.append(f"active conditions: {', '.join(sorted(self.active))}")
        return {
            "channels": channels,
            "spool": self.spool.path if not self.spool_error else self.spool_error,
            "active": sorted(self.active),
            "held": sorted(self.held),
            "node": self.scene().node.describe(),
            "lines": lines,
        }

    def metrics(self) -> Iterable[Metric]:
        sent = CounterMetricFamily(
            "training_node_alerts_sent",
            "Alerts the channel's service accepted (a digest counts each alert).",
            labels=["channel"],
        )
        messages = CounterMetricFamily(
            "training_node_alerts_messages",
            "Messages the channel's service accepted, digests included.",
            labels=["channel"],
        )
        digests = CounterMetricFamily(
            "training_node_alerts_digests",
            "Digest messages that grouped a backlog of alerts.",
            labels=["channel"],
        )
        failed = CounterMetricFamily(
            "training_node_alerts_failed",
            "Failed delivery attempts, by reason.",
            labels=["channel", "reason"],
        )
        dropped = CounterMetricFamily(
            "training_node_alerts_dropped",
            "Alerts that will not be delivered, by reason (duplicate, permanent_error, queue_full, ...).",
            labels=["channel", "reason"],
        )
        depth = GaugeMetricFamily(
            "training_node_alerts_queue_depth", "Alerts waiting in the channel's spool.", labels=["channel"]
        )
        for name, d in self.deliveries.items():
            sent.add_metric([name], d.sent)
            messages.add_metric([name], d.messages)
            digests.add_metric([name], d.digests)
            for reason, n in sorted(d.failed.items()):
                failed.add_metric([name, reason], n)
            for reason, n in sorted(d.dropped.items()):
                dropped.add_metric([name, reason], n)
            depth.add_metric([name], 0 if self._closed else self.spool.depth(name))
        for name, n in self.orphaned.items():
            dropped.add_metric([name, "channel_removed"], n)
        yield from (sent, messages, digests, failed, dropped, depth)
