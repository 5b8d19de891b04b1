"""The GPUs' NVML reads off the collector's thread, so a call that hangs holds that GPU alone.

A driver can stop answering for one GPU (a GPU falling off the bus, a wedged channel) while the others
answer. Read one after another on the collector's thread, the first hung call would hold every GPU's
figures, and the collector would time out as a whole. Instead a :class:`Reader` thread reads the
GPUs in order (one hand-over per tick: a thread per GPU cost twice the collector's CPU, each wake-up
of a thread being ~50-100 us on a VM) while the collector waits with a deadline per GPU. A GPU whose
call outlasts it is left to that thread, shown unresponsive and not asked again until the call
returns; the GPUs after it are read by other readers, each on its own, so however many hang, a tick
waits at most two call timeouts. Readers are daemon threads: a call that never returns never holds
the process's exit.

Opening NVML can hang the same way (``nvmlInit``, or the first call on a wedged GPU): an
:class:`Opening` runs it on a thread of its own, so the collector comes back each tick with an error
("initialisation has not returned") instead of sitting in the call until the watchdog restarts the
agent, and with it the kernel log's reading, again and again.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

Job = tuple[int, Callable[[], Any]]  # (GPU index, its reads)
Outcome = tuple[Any, BaseException | None]


class Batch:
    """GPUs read in order by one reader; what came back so far, and which GPU is being read since when.

    The collector waits on one lock that the reader releases once every GPU is read: one wake-up a
    tick. A Condition woke it up to three times (its notify, its own lock still held by the notifier,
    then the GIL), and the hand-over was a tenth of the agent's CPU with 8 GPUs. ``_step`` guards only
    the reader's moving to the next GPU against the collector's giving up on the current one; a
    result is one dict store, atomic under the GIL."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.jobs = list(jobs)
        self.results: dict[int, Outcome] = {}
        # (the GPU being read, since when): one attribute, so that it is never read half updated;
        # the first GPU's clock starts at the hand-over
        self.at: tuple[int | None, float] = (self.jobs[0][0] if self.jobs else None, time.monotonic())
        self.abandoned = False
        self._step = threading.Lock()
        self._running = threading.Lock()  # held from the hand-over until every GPU is read
        if self.jobs:
            self._running.acquire()

    @property
    def done(self) -> bool:
        return not self._running.locked()

    def wait(self, call_timeout: float, deadline: float | None = None) -> int | None:
        """Until every GPU is read (None), or one GPU's call has run ``call_timeout`` (or the
        ``deadline`` passed while it ran): that GPU is then left to the reader (its index)."""
        while True:
            ends = self.at[1] + call_timeout
            if deadline is not None:
                ends = min(ends, deadline)
            left = ends - time.monotonic()
            if left > 0 and self._running.acquire(timeout=left):
                self._running.release()
                return None
            with self._step:  # the reader cannot move on meanwhile
                if self.done:
                    return None
                current, since = self.at
                now = time.monotonic()
                if now - since >= call_timeout or (deadline is not None and now >= deadline):
                    self.abandoned = True  # the reader stops once the call returns
                    return current

    def outcomes(self) -> dict[int, Outcome]:
        return dict(self.results)

    def hung_for(self, now: float) -> float:
        return now - self.at[1]

    def run(self) -> None:
        try:
            for index, fn in self.jobs:
                with self._step:
                    if self.abandoned:
                        break
                    self.at = (index, time.monotonic())
                try:
                    outcome: Outcome = (fn(), None)
                except BaseException as e:  # handed to the collector, which re-raises it
                    outcome = (None, e)
                self.results[index] = outcome
        finally:
            if self.jobs:
                self._running.release()


class Reader:
    def __init__(self, number: int) -> None:
        self._queue: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self.batch: Batch | None = None
        threading.Thread(target=self._run, name=f"nvml-reader{number}", daemon=True).start()

    def idle(self) -> bool:
        return self.batch is None or self.batch.done

    def read(self, jobs: Sequence[Job]) -> Batch:
        self.batch = Batch(jobs)
        self._queue.put(self.batch)
        return self.batch

    def close(self) -> None:
        self._queue.put(None)  # a reader inside a hung call sees it once the call returns

    def _run(self) -> None:
        while (batch := self._queue.get()) is not None:
            batch.run()


class Readers:
    """The readers, and the GPUs left to one inside a call that has not returned."""

    def __init__(self, call_timeout: float) -> None:
        self.call_timeout = call_timeout
        self._readers: list[Reader] = []
        self._hung: dict[int, Batch] = {}  # GPU index -> the batch whose reader is inside its call

    def hung_for(self, index: int, now: float) -> float | None:
        batch = self._hung.get(index)
        if batch is None:
            return None
        if batch.done:  # the call returned (its figures are stale: the next tick asks again)
            del self._hung[index]
            return None
        return batch.hung_for(now)

    def read(self, jobs: Sequence[Job]) -> dict[int, Outcome]:
        """Each job's outcome; a GPU missing from it did not answer in time (see ``hung_for``)."""
        batch = self._reader().read(jobs)
        stuck = batch.wait(self.call_timeout)
        out = batch.outcomes()
        if stuck is None:
            return out
        self._hung[stuck] = batch
        rest = [(i, fn) for i, fn in jobs if i not in out and i != stuck]
        deadline = time.monotonic() + self.call_timeout
        alone = [self._reader().read([job]) for job in rest]  # all at once: more may hang
        for (index, _), b in zip(rest, alone, strict=True):
            if b.wait(self.call_timeout, deadline) is not None:
                self._hung[index] = b
            out.update(b.outcomes())
        return out

    def _reader(self) -> Reader:
        for r in self._readers:
            if r.idle():
                return r
        self._readers.append(Reader(len(self._readers)))
        return self._readers[-1]

    def close(self) -> None:
        for r in self._readers:
            r.close()
        self._readers.clear()


class Opening:
    """``open_`` running on a thread of its own; its result or exception once ``done``."""

    def __init__(self, open_: Callable[[], Any]) -> None:
        self.started = datetime.now(UTC)
        self.done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, args=(open_,), name="nvml-open", daemon=True).start()

    def _run(self, open_: Callable[[], Any]) -> None:
        try:
            self._result = open_()
        except BaseException as e:  # handed to the collector's thread, which raises it there
            self._error = e
        finally:
            self.done.set()

    def outcome(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._result
