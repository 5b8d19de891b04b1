"""The sampling loop: every ``interval`` it asks each collector for its part and publishes one snapshot.

Collectors run in worker threads, off the event loop. A worker takes the tick's collectors one after
another, so quick ones cost a single hand-off between the loop and the pool per tick and never fight
over the GIL. A call still running after ``STAGGER`` is left to its worker and another worker takes
the next collector, so a slow collector never delays the others. A tick waits for the calls at most
a fraction of the interval: until a slow call returns, snapshots carry its last part (and its rates
stay those of its last interval). A call still running after ``timeout`` counts as failed, and its
part leaves the snapshot. A call still running is never started again (one stuck NVML or NFS read
must not pile up threads), except by a collector that holds its hangs back itself: one with a
``join_after`` (the GPU collector, whose calls can hang one GPU at a time) gets a new call once its
call has run that long, on another worker, and the older call's outcome is dropped when it returns
(the collector keeps the new call out of what the old one is stuck in, so threads pile up at most
one per GPU). A collector that is stuck for longer than ``stall_after`` means the
node's view is wedged: ``healthy()`` turns false, /healthz answers 503 and the systemd watchdog stops
being fed, so systemd restarts the agent.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import structlog

from agent.snapshot import CollectorStatus, NodeSnapshot
from agent.snapshot.rates import NodeRates
from agent.sources import Collector, SourceAbsent, registry

log = structlog.get_logger("sampler")

STAGGER = 0.05  # seconds a collector runs alone before the next one is started beside it
JOINED_CALLS = 16  # workers beyond one per collector, for calls joined beside one that hangs

Outcome = tuple[Any, BaseException | None, float, float]  # part, exception, monotonic start and end


def _timed(fn: Callable[[], Any]) -> Outcome:
    t0 = time.monotonic()
    try:
        return fn(), None, t0, time.monotonic()
    except Exception as e:  # reported by the sampler, never raised into the loop
        return None, e, t0, time.monotonic()


@dataclass
class _Slot:
    collector: Collector
    rates_fn: Callable[[Any, Any, float], Any] | None  # its source's rates(prev, cur, seconds)
    # Set while a call is queued or running, None when idle: the loop sets it when it queues the
    # slot (and clears it if no worker took the slot by the deadline); the worker that takes the slot
    # sets it to the call's start and clears it after setting ``outcome``, so the loop never sees an
    # idle slot without the result of its last call.
    busy_since: float | None = None
    outcome: Outcome | None = None  # a finished call the loop has not settled yet
    join_after: float | None = None  # the collector's: a call running this long gets a new one beside it
    token: int = 0  # raised when a call is joined: an outcome from a call with an older one is dropped
    lock: threading.Lock = field(default_factory=threading.Lock)  # the token against the outcome
    last_part: Any = None
    last_status: CollectorStatus | None = None
    finished: float = 0.0  # monotonic time the last successful call returned
    rates: Any = None  # the rates of its last interval (its source's rates dataclass), None without
    logged_absent: bool = False
    last_error: str | None = None
    failing_since: float | None = None


class _Batch:
    """One tick's calls. Workers take the queued slots one after another; the loop is woken once,
    when the last worker runs out of slots, instead of once per collector."""

    def __init__(self, slots: Iterable[_Slot], loop: asyncio.AbstractEventLoop) -> None:
        self.queue = deque(slots)
        self.done: asyncio.Future[None] = loop.create_future()
        self._loop = loop
        self._lock = threading.Lock()
        self._workers = 0

    def add_worker(self, pool: ThreadPoolExecutor) -> None:
        with self._lock:
            self._workers += 1
        pool.submit(self._work)

    def take_rest(self) -> list[_Slot]:
        """The slots no worker has taken; none will be taken after this."""
        rest = []
        while True:
            try:
                rest.append(self.queue.popleft())  # atomic: a slot goes to the loop or to one worker
            except IndexError:
                return rest

    def _work(self) -> None:
        try:
            while True:
                try:
                    s = self.queue.popleft()
                except IndexError:
                    return
                with s.lock:
                    token = s.token
                    s.busy_since = time.monotonic()
                outcome = None
                try:
                    outcome = _timed(s.collector.collect)
                finally:
                    with s.lock:
                        if s.token == token:  # else a newer call joined this one: its outcome counts
                            s.outcome = outcome
                            s.busy_since = None
        finally:
            with self._lock:
                self._workers -= 1
                last = self._workers == 0
            if last:
                try:
                    self._loop.call_soon_threadsafe(_resolve, self.done)
                except RuntimeError:  # the loop is closed: the daemon is exiting
                    pass


def _rates(fn: Callable[[Any, Any, float], Any] | None, prev: Any, cur: Any, dt: float) -> Any:
    """The source's rates over the interval from ``prev`` to ``cur``; None without a valid interval."""
    if fn is None or prev is None or dt <= 0:
        return None
    return fn(prev, cur, dt)


def _interval(prev: Any, cur: Any, returned: float) -> float:
    """Seconds between two parts' counter reads where the source stamps them (``read_at``), else
    between the calls' returns. A return can lag its reads by a thread switch or two: at 100 ms ticks
    on a busy 2-core host that put single rates 40% above a tc-capped link's ceiling, and a learned
    ceiling with them."""
    a, b = getattr(prev, "read_at", None), getattr(cur, "read_at", None)
    return b - a if a is not None and b is not None else returned


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


@dataclass
class Sampler:
    collectors: list[Collector]
    interval: float
    timeout: float
    stall_after: float
    listeners: list[Callable[[NodeSnapshot], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._slots = [
            _Slot(c, registry.source(c.part).rates, join_after=getattr(c, "join_after", None))
            for c in self.collectors
        ]
        # one thread per collector, plus one spare so a returning stuck call never blocks a fresh one,
        # plus the joined calls' (made only as needed, and stuck at most one per GPU)
        self._pool = ThreadPoolExecutor(
            max_workers=len(self._slots) + 1 + JOINED_CALLS, thread_name_prefix="collector"
        )
        self.latest: NodeSnapshot = NodeSnapshot(seq=0, timestamp=time.time(), monotonic=time.monotonic())
        self.last_progress = time.monotonic()
        self.started = time.monotonic()
        self._seq = 0
        self._built = 0  # snapshots this sampler made: its first has no interval of its own

    def carry_on(self, previous: Sampler) -> None:
        """A reload's new sampler: the last snapshot stays served (status, /metrics, the READY line)
        until this one's first tick, and the tick count goes on instead of back to 0."""
        self.latest = previous.latest
        self._seq = previous._seq

    # --- health ------------------------------------------------------------------------------------

    def stall_reason(self, now: float | None = None) -> str | None:
        """Why sampling is not making progress, or None when it is."""
        now = time.monotonic() if now is None else now
        if now - self.last_progress > self.stall_after:
            return f"no snapshot for {now - self.last_progress:.1f}s"
        for s in self._slots:
            started = s.busy_since
            if started is not None and now - started > self.stall_after:
                return f"collector {s.collector.name} stuck for {now - started:.1f}s"
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
        idle = [s for s in self._slots if s.busy_since is None or self._join(s, now)]  # else stuck
        for s in idle:
            self._settle(s, now)  # a call that returned after the last tick's deadline
            s.busy_since = now
        batch = _Batch(idle, loop)
        try:
            if idle:
                batch.add_worker(self._pool)
            while not batch.done.done() and (left := deadline - time.monotonic()) > 0:
                await asyncio.wait([batch.done], timeout=min(STAGGER, left) if batch.queue else left)
                if batch.queue and not batch.done.done():
                    batch.add_worker(self._pool)  # the call in progress is slow: go on beside it
        finally:
            for s in batch.take_rest():  # every worker still busy at the deadline: next tick
                s.busy_since = None
        for s in self._slots:
            self._settle(s, time.monotonic())
        snap = self._build(now)
        self.latest = snap
        self.last_progress = time.monotonic()
        for listener in self.listeners:
            try:
                listener(snap)
            except Exception:
                log.exception("snapshot listener failed", listener=getattr(listener, "__qualname__", "?"))
        return snap

    def _join(self, s: _Slot, now: float) -> bool:
        """Whether a busy slot's call has run past its collector's ``join_after``: then its outcome
        will be dropped, and the slot is called again."""
        started = s.busy_since
        if s.join_after is None or started is None or now - started < s.join_after:
            return False
        with s.lock:
            s.token += 1
        log.info("collector call still running; another joins it", collector=s.collector.name,
                 running=round(now - started, 2))  # fmt: skip
        return True

    def _settle(self, s: _Slot, now: float) -> None:
        name = s.collector.name
        started, outcome = s.busy_since, s.outcome  # in this order: see _Slot
        if started is not None:
            running = now - started
            if running > self.timeout:
                s.last_part = None
                s.rates = None
                s.last_status = CollectorStatus(
                    name, False, running, error=f"timed out after {self.timeout:g}s", stuck_seconds=running
                )
                self._mark_failing(s, now, s.last_status.error)
            return  # a call within its timeout keeps the last part until it returns
        if outcome is None:
            return
        s.outcome = None  # consumed; the next tick starts a new call
        result, exc, t0, finished = outcome
        duration = finished - t0
        if exc is None:
            dt = _interval(s.last_part, result, finished - s.finished)
            s.rates = _rates(s.rates_fn, s.last_part, result, dt)
            s.last_part = result
            s.finished = finished
            s.last_status = CollectorStatus(name, True, duration)
            if s.failing_since is not None:
                log.info("collector recovered", collector=name)
            s.failing_since = None
            s.last_error = None
        elif isinstance(exc, SourceAbsent):
            s.last_part = None
            s.rates = None
            s.last_status = CollectorStatus(name, False, duration, error=str(exc), absent=True)
            if not s.logged_absent:
                log.warning("cannot see source", collector=name, reason=str(exc))
                s.logged_absent = True
        else:
            s.last_part = None
            s.rates = None
            err = f"{type(exc).__name__}: {exc}"[:300]
            s.last_status = CollectorStatus(name, False, duration, error=err)
            self._mark_failing(s, now, err)
            if s.last_error != err:
                log.warning("collector failed", collector=name, error=err, exc_info=exc)
            s.last_error = err

    def _mark_failing(self, s: _Slot, now: float, err: str | None) -> None:
        if s.failing_since is None:
            s.failing_since = now
            if err and "timed out" in err:
                log.warning("collector timed out", collector=s.collector.name, timeout=self.timeout)

    def _build(self, now: float) -> NodeSnapshot:
        prev = self.latest
        parts: dict[str, Any] = {}
        statuses: dict[str, CollectorStatus] = {}
        by_source: dict[str, Any] = {}
        for s in self._slots:
            if s.last_status is not None:
                statuses[s.collector.name] = s.last_status
            if s.last_part is not None:
                parts[s.collector.part] = s.last_part
                if s.rates is not None:
                    by_source[s.collector.part] = s.rates
        rates = NodeRates(now - prev.monotonic if self._built else 0.0, by_source)
        self._built += 1
        self._seq += 1
        return NodeSnapshot(
            seq=self._seq, timestamp=time.time(), monotonic=now, parts=parts, collectors=statuses, rates=rates
        )

    def close(self) -> None:
        for s in self._slots:
            try:
                s.collector.close()
            except Exception:
                log.exception("collector close failed", collector=s.collector.name)
        # a stuck call cannot be interrupted; don't wait for it on shutdown
        self._pool.shutdown(wait=False, cancel_futures=True)
