"""Opening NVML off the collector's thread, so that a call that hangs there does not hold the tick.

Opening NVML can hang (``nvmlInit``, or the first call on a wedged GPU): an :class:`Opening` runs it
on a thread of its own, so the collector comes back each tick with an error ("initialisation has not
returned") instead of sitting in the call until the watchdog restarts the agent, and with it the
kernel log's reading, again and again.

A read that hangs once NVML is open holds only its GPU by other means: the collector reads the GPUs
on the sampler's worker, and the sampler joins a call that has run ``join_after`` with a new one
that reads the other GPUs (``collector.py``, ``runtime/sampler.py``). Reading on a thread of the
collector's own cost a hand-over each tick, ~0.2 ms of the agent's 3 ms a tick with 8 GPUs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


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
