"""One channel's sender: spool -> rate limit -> one message or a digest -> POST -> judge -> retry or drop.

Sends are sequential per channel (one request in flight), so the rate limit holds and order is kept,
except that priority alerts (spot and maintenance notices) go first. When more alerts wait than the
rate limit lets out right now, they go as one digest; the spool rows leave only once the service has
accepted the message that carries them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
import structlog

from agent.alerts.message import Message
from agent.alerts.ratelimit import Limiter
from agent.alerts.render import digest
from agent.alerts.services.base import Channel, Outcome, Reply, Request, post
from agent.alerts.spool import Row, Spool
from agent.config.alerts import AlertsSection, WebhookChannel, channel_language
from agent.core import backoff
from agent.core.aio import wait_within
from agent.core.zones import zone

log = structlog.get_logger("alerts")


class Delivery:
    def __init__(
        self,
        cfg: WebhookChannel,
        section: AlertsSection,
        spool: Spool,
        session: Callable[[], aiohttp.ClientSession],
        channel: Channel | None,
        error: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = cfg.name
        self.type = cfg.type
        self.channel = channel
        self.error = error  # why the channel can't be used (its secret can't be read)
        self.language = channel_language(section, cfg)
        self.events = frozenset(cfg.events)
        self.severities = frozenset(cfg.severities)
        self.timeout = cfg.timeout
        self.limiter = Limiter(cfg.rates, clock)
        self.spool = spool
        self._session = session
        self._clock = clock
        self._section = section
        self.tz = zone(section.timezone)
        self.wake = asyncio.Event()
        self.sent = 0  # alerts delivered (a digest counts all it carries)
        self.messages = 0  # messages the service accepted
        self.digests = 0
        self.failed: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.failures_in_row = 0
        self.paused_until = 0.0
        self.last_ok: datetime | None = None
        self.last_error: str | None = None
        self.last_permanent = False
        self._service_wait = False  # the current pause is the service's Retry-After, not our backoff
        self._logged: set[str] = set()  # permanent errors already logged since the last success
        self._in_flight: asyncio.Future[None] | None = None  # the request out now, and its settling

    def accepts(self, kind: str, severity: str) -> bool:
        return kind in self.events and severity in self.severities

    def enqueue(self, msg: Message) -> None:
        if self.channel is None:
            self.dropped["channel_unavailable"] += 1
            return
        while self.spool.depth(self.name) >= self._section.queue_size:
            if self.spool.drop_oldest(self.name) is None:
                break
            self.dropped["queue_full"] += 1
            if self.dropped["queue_full"] in (1, 10, 100) or self.dropped["queue_full"] % 1000 == 0:
                log.warning(
                    "alert queue full; dropped the oldest",
                    channel=self.name,
                    dropped=self.dropped["queue_full"],
                )
        self.spool.add(self.name, msg)
        if msg.priority and not self._service_wait:
            # a notice does not sit out our own backoff (minutes): one attempt now; a wait the
            # service asked for is kept, sending earlier would only be refused again
            self.paused_until = min(self.paused_until, self._clock())
        self.wake.set()

    # --- sending -----------------------------------------------------------------------------------

    async def run(self) -> None:
        if self.channel is None:
            return  # nothing can be sent; enqueue() counts what arrives
        while True:
            if not await self.step(None):
                self.wake.clear()
                if self.spool.depth(self.name) == 0:
                    await self.wake.wait()

    async def flush(self, deadline: float) -> None:
        """Deliver what is queued until the queue is empty or ``deadline`` (monotonic) comes."""
        while self.channel is not None and self.spool.depth(self.name) and self._clock() < deadline:
            if not await self.step(deadline):
                return

    async def _sleep_until(self, when: Callable[[], float], deadline: float | None) -> bool:
        """Wait until ``when()`` (re-read whenever something is enqueued); False if past ``deadline``."""
        while True:
            at = when()
            wait = at - self._clock()
            if wait <= 0:
                return True
            if deadline is not None and at > deadline:
                return False
            self.wake.clear()
            await wait_within(self.wake, wait)

    async def step(self, deadline: float | None) -> bool:
        """Send one message (or digest) if one is due; False when nothing could be done in time."""
        if (out := self.in_flight()) is not None:
            await asyncio.shield(out)
        if self.channel is None or not self.spool.depth(self.name):
            return False
        if not await self._sleep_until(lambda: self.paused_until, deadline):
            return False
        if not await self._sleep_until(lambda: self._clock() + self.limiter.wait_time(), deadline):
            return False
        rows = self.spool.peek(self.name, self._section.max_digest)
        unreadable = [r.id for r in rows if r.message is None]
        if unreadable:
            self.spool.delete(unreadable)
            self.dropped["unreadable"] += len(unreadable)
            rows = [r for r in rows if r.message is not None]
        if not rows:
            return True
        if rows[0].priority or len(rows) == 1 or self.limiter.available() >= len(rows):
            batch, msg = rows[:1], rows[0].message
        else:
            batch = rows
            msg = digest([r.message for r in rows], self.language, self.tz, datetime.now(UTC))
        try:
            request = self.channel.build(msg)
        except Exception:  # a formatting bug must not wedge the channel on this message forever
            log.exception("cannot format alert; dropped", channel=self.name, title=msg.title)
            self.spool.delete([r.id for r in batch])
            self.dropped["render_error"] += msg.count
            return True
        self.limiter.take()
        self.spool.sending([r.id for r in batch])
        # A stop (reload, shutdown) cancels this task while the request is out: the send goes on
        # and its answer (within the timeout) settles the rows, and the next step, a flush's
        # included, waits for that first, so a row is never sent while its request is still out.
        self._in_flight = asyncio.ensure_future(self._send(request, batch, msg))
        await asyncio.shield(self._in_flight)
        return True

    def in_flight(self) -> asyncio.Future[None] | None:
        """The send whose answer has not come yet, if any."""
        return self._in_flight if self._in_flight is not None and not self._in_flight.done() else None

    async def _send(self, request: Request, batch: list[Row], msg: Message) -> None:
        assert self.channel is not None
        answer = await post(self._session(), request, self.timeout)
        outcome = answer if isinstance(answer, Outcome) else self.channel.judge(answer)
        self._record(outcome, batch, msg, answer if isinstance(answer, Reply) else None)

    def recover(self) -> None:
        """Rows a process left in flight when it died (kill -9, power loss): the service may or may
        not have them. Sent again where the receiver drops repeats; otherwise removed and counted
        (``dropped{reason="outcome_unknown"}`` and a warning naming them), never shown twice."""
        cut = self.spool.in_flight(self.name)
        if not cut:
            return
        ids = [r.id for r in cut]
        titles = [r.message.title if r.message else "?" for r in cut]
        if self.channel is not None and self.channel.idempotent:
            self.spool.attempted(ids)
            log.info(
                "sending again alerts whose delivery a restart cut off; the receiver drops repeats",
                channel=self.name,
                ids=ids,
                titles=titles,
            )
            return
        self.spool.delete(ids)
        self.dropped["outcome_unknown"] += len(ids)
        log.warning(
            "alert delivery cut off by a restart; not sent again, the service may or may not show it",
            channel=self.name,
            ids=ids,
            titles=titles,
        )

    def _record(self, outcome: Outcome, batch: list[Row], msg: Message, reply: Reply | None) -> None:
        ids = [r.id for r in batch]
        if outcome.ok:
            self.spool.delete(ids)
            self.sent += msg.count
            self.messages += 1
            self.digests += 1 if msg.items else 0
            self.failures_in_row = 0
            self.paused_until = 0.0
            self.last_ok = datetime.now(UTC)
            self.last_permanent = False
            self._logged.clear()
            log.info("alert delivered", channel=self.name, title=msg.title, alerts=msg.count)
            return
        self.failed[outcome.reason] += 1
        self.last_error = outcome.describe()
        if outcome.retryable:
            self.spool.attempted(ids)
            self.failures_in_row += 1
            s = self._section
            wait = outcome.retry_after
            self._service_wait = wait is not None
            if wait is None:
                wait = backoff.delay(self.failures_in_row, s.backoff_initial, s.backoff_max)
            self.paused_until = self._clock() + wait
            if self.failures_in_row == 1 or self.failures_in_row % 10 == 0:
                log.warning(
                    "alert delivery failed; will retry",
                    channel=self.name,
                    error=self.last_error,
                    retry_in_seconds=round(wait, 2),
                    attempt=self.failures_in_row,
                    queued=self.spool.depth(self.name),
                )
            return
        # permanent: the service will refuse this message however often we send it
        self.spool.delete(ids)
        self.dropped["permanent_error"] += msg.count
        self.failures_in_row = 0
        self.last_permanent = True
        key = f"{outcome.reason}:{outcome.code}"
        if key not in self._logged:
            self._logged.add(key)
            log.error(
                "alert refused by the service; not retrying",
                channel=self.name,
                type=self.type,
                code=outcome.code,
                provider_message=outcome.detail,
                reason=outcome.reason,
                http_status=reply.status if reply else None,
            )

    # --- faces -------------------------------------------------------------------------------------

    def state(self) -> str:
        if self.channel is None:
            return "unavailable"
        if self.failures_in_row and self.paused_until > self._clock():
            return "retrying"
        if self.last_permanent:
            return "failing"
        return "ok" if self.last_ok else "idle"

    def status(self) -> dict[str, Any]:
        retry_in = max(0.0, self.paused_until - self._clock()) if self.failures_in_row else 0.0
        return {
            "type": self.type,
            "url": self.channel.redacted_url() if self.channel else None,
            "language": self.language,
            "state": self.state(),
            "error": self.error,
            "queued": self.spool.depth(self.name),
            "sent": self.sent,
            "messages": self.messages,
            "digests": self.digests,
            "failed": dict(self.failed),
            "dropped": dict(self.dropped),
            "last_ok": self.last_ok.isoformat() if self.last_ok else None,
            "last_error": self.last_error,
            "retry_in_seconds": round(retry_in, 1),
        }

    def line(self) -> str:
        st = self.state()
        text = f"{self.name} ({self.type}): {st}, {self.spool.depth(self.name)} queued, {self.sent} sent"
        if sum(self.dropped.values()):
            text += ", dropped " + " ".join(f"{k}={v}" for k, v in sorted(self.dropped.items()))
        if st == "unavailable":
            text += f": {self.error}"
        elif st in ("retrying", "failing") and self.last_error:
            text += f"; last error {self.last_error}"
        return text
