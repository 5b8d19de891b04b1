"""The sampling loop: every ``interval`` it asks each collector for its part and publishes one snapshot.

Each collector runs in its own worker thread. A tick waits for the calls at most a fraction of the
interval, so a slow collector never delays the others: until it returns, snapshots carry its last
part (and its rates stay those of its last interval). A call still running after ``timeout`` counts as
failed, and its part leaves the snapshot. A call still running is never started again (one stuck NVML
or NFS read must not pile up threads). A collector that is stuck for longer than
``stall_after`` means the node's view is wedged: ``healthy()`` turns false, /healthz answers 503 and
the systemd watchdog stops being fed, so systemd restarts the agent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import structlog

from agent.collectors import Collector, SourceAbsent
from agent.snapshot import CollectorStatus, NodeSnapshot
from agent.snapshot.rates import NodeRates, family_rates

log = structlog.get_logger("sampler")

PARTS = ("host", "gpu", "storage", "network", "processes")
STAGGER = 0.05  # seconds a collector runs alone before the next one is started beside it


def _timed(fn: Callable[[], Any]) -> tuple[Any, BaseException | None, float]:
    t0 = time.perf_counter()
    try:
        return fn(), None, time.perf_counter() - t0
    except Exception as e:  # reported by the sampler, never raised into the loop
        return None, e, time.perf_counter() - t0


@dataclass
class _Slot:
    collector: Collector
    future: Future[Any] | None = None
    started: float = 0.0
    last_part: Any = None
    last_status: CollectorStatus | None = None
    finished: float = 0.0  # monotonic time the last successful call returned
    rates: dict[str, object] = field(default_factory=dict)  # this part's fields of NodeRates
    logged_absent: bool = False
    last_error: str | None = None
    failing_since: float | None = None


@dataclass
class Sampler:
    collectors: list[Collector]
    interval: float
    timeout: float
    stall_after: float
    listeners: list[Callable[[NodeSnapshot], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._slots = [_Slot(c) for c in self.collectors]
        # one thread per collector, plus one spare so a returning stuck call never blocks a fresh one
        self._pool = ThreadPoolExecutor(max_workers=len(self._slots) + 1, thread_name_prefix="collector")
        self.latest: NodeSnapshot = NodeSnapshot(seq=0, timestamp=time.time(), monotonic=time.monotonic())
        self.last_progress = time.monotonic()
        self.started = time.monotonic()
        self.ticks = 0
        self._seq = 0

    # --- health ------------------------------------------------------------------------------------

    def stall_reason(self, now: float | None = None) -> str | None:
        """Why sampling is not making progress, or None when it is."""
        now = time.monotonic() if now is None else now
        if now - self.last_progress > self.stall_after:
            return f"no snapshot for {now - self.last_progress:.1f}s"
        for s in self._slots:
            if s.future is not None and not s.future.done() and now - s.started > self.stall_after:
                return f"collector {s.collector.name} stuck for {now - s.started:.1f}s"
        return None

    def failing_for(self, name: str, now: float | None = None) -> float | None:
        for s in self._slots:
            if s.collector.name == name and s.failing_since is not None:
                return (time.monotonic() if now is None else now) - s.failing_since
        return None

    # --- loop --------------------------------------------------------------------------------------

    async def run(self) -> None:
        next_tick = time.monotonic()
        while True:
            await self.tick()
            next_tick += self.interval
            delay = next_tick - time.monotonic()
            if delay < 0:  # fell behind (suspended VM, overloaded host): skip, don't burst
                next_tick = time.monotonic()
                delay = 0
            await asyncio.sleep(delay)

    async def tick(self) -> NodeSnapshot:
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        deadline = now + min(self.timeout, self.interval * 0.8)
        slow: list[asyncio.Future[Any]] = []
        for s in self._slots:
            if s.future is not None and not s.future.done():
                continue  # still stuck in a previous call
            s.started = time.monotonic()
            s.future = self._pool.submit(_timed, s.collector.collect)
            call = asyncio.wrap_future(s.future, loop=loop)
            # One at a time while calls are quick: parallel threads would fight over the GIL at every
            # file read and cost more CPU. A call slower than STAGGER is left running, and the next
            # collector starts beside it.
            done, _ = await asyncio.wait([call], timeout=max(0.0, min(STAGGER, deadline - time.monotonic())))
            if not done:
                slow.append(call)
        if slow:
            await asyncio.wait(slow, timeout=max(0.0, deadline - time.monotonic()))
        for s in self._slots:
            self._settle(s, time.monotonic())
        snap = self._build(now)
        self.latest = snap
        self.last_progress = time.monotonic()
        self.ticks += 1
        for listener in self.listeners:
            try:
                listener(snap)
            except Exception:
                log.exception("snapshot listener failed", listener=getattr(listener, "__qualname__", "?"))
        return snap

    def _settle(self, s: _Slot, now: float) -> None:
        name = s.collector.name
        fut = s.future
        if fut is None:
            return
        if not fut.done():
            running = now - s.started
            if running > self.timeout:
                s.last_part = None
                s.rates = {}
                s.last_status = CollectorStatus(
                    name, False, running, error=f"timed out after {self.timeout:g}s", stuck_seconds=running
                )
                self._mark_failing(s, now, s.last_status.error)
            return  # a call within its timeout keeps the last part until it returns
        result, exc, duration = fut.result()
        if exc is None:
            finished = s.started + duration
            s.rates = family_rates(s.collector.part, s.last_part, result, finished - s.finished)
            s.last_part = result
            s.finished = finished
            s.last_status = CollectorStatus(name, True, duration)
            if s.failing_since is not None:
                log.info("collector recovered", collector=name)
            s.failing_since = None
            s.last_error = None
        elif isinstance(exc, SourceAbsent):
            s.last_part = None
            s.rates = {}
            s.last_status = CollectorStatus(name, False, duration, error=str(exc), absent=True)
            if not s.logged_absent:
                log.warning("cannot see source", collector=name, reason=str(exc))
                s.logged_absent = True
        else:
            s.last_part = None
            s.rates = {}
            err = f"{type(exc).__name__}: {exc}"[:300]
            s.last_status = CollectorStatus(name, False, duration, error=err)
            self._mark_failing(s, now, err)
            if s.last_error != err:
                log.warning("collector failed", collector=name, error=err, exc_info=exc)
            s.last_error = err
        s.future = None  # consumed; the next tick starts a new call

    def _mark_failing(self, s: _Slot, now: float, err: str | None) -> None:
        if s.failing_since is None:
            s.failing_since = now
            if err and "timed out" in err:
                log.warning("collector timed out", collector=s.collector.name, timeout=self.timeout)

    def _build(self, now: float) -> NodeSnapshot:
        prev = self.latest
        parts: dict[str, Any] = {p: None for p in PARTS}
        statuses: dict[str, CollectorStatus] = {}
        rate_fields: dict[str, object] = {"interval_seconds": now - prev.monotonic if prev.seq else 0.0}
        for s in self._slots:
            if s.last_status is not None:
                statuses[s.collector.name] = s.last_status
            if s.last_part is not None:
                parts[s.collector.part] = s.last_part
                rate_fields.update(s.rates)
        rates = NodeRates(**rate_fields)  # type: ignore[arg-type]
        self._seq += 1
        return NodeSnapshot(
            seq=self._seq,
            timestamp=time.time(),
            monotonic=now,
            collectors=statuses,
            rates=rates,
            **parts,
        )

    def close(self) -> None:
        for s in self._slots:
            try:
                s.collector.close()
            except Exception:
                log.exception("collector close failed", collector=s.collector.name)
        # a stuck call cannot be interrupted; don't wait for it on shutdown
        self._pool.shutdown(wait=False, cancel_futures=True)
