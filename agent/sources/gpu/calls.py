"""Each GPU's NVML reads on a thread of its own, so a call that hangs holds that GPU alone.

A driver can stop answering for one GPU (a GPU falling off the bus, a wedged channel) while the others
answer. Read one after another, the first hung call would hold every GPU's figures and the collector
would time out as a whole. Each GPU's reads run on their own daemon thread instead (the collector
asks them one after another): a GPU whose call has not returned by the deadline is shown
unresponsive, and is not asked again until that call returns. The threads are daemons, so a call
that never returns never holds the process's exit.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class GpuCalls:
    def __init__(self, index: int) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._run, name=f"nvml-gpu{index}", daemon=True)
        self._thread.start()
        self.pending: Future[Any] | None = None  # the call that did not return by its deadline
        self.pending_since = 0.0  # monotonic time it was made

    def call(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        self._queue.put((fut, fn, args))
        return fut

    def busy(self) -> bool:
        """Still inside a call that missed an earlier deadline."""
        if self.pending is not None and self.pending.done():
            self.pending = None
        return self.pending is not None

    def hung_for(self, now: float) -> float:
        return now - self.pending_since

    def left_running(self, fut: Future[Any], since: float) -> None:
        self.pending, self.pending_since = fut, since

    def close(self) -> None:
        self._queue.put(None)  # a thread inside a hung call sees it once the call returns

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # handed to the collector, which re-raises it
                fut.set_exception(e)
