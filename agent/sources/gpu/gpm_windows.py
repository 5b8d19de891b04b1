"""The thread that closes GPM windows between ticks (``WindowClock``), for the GPUs whose
``gpm_cadence.WindowCadence`` wants them."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from agent.sources.gpu.gpm_cadence import windows_per_tick

if TYPE_CHECKING:
    from agent.sources.gpu.nvml import Device, Nvml


class Schedule(NamedTuple):
    at: float  # monotonic time of the tick
    step: float  # seconds between windows
    windows: int
    nvml: Nvml | None  # None: nothing to do (``pause``)
    devices: tuple[Device, ...]


NOTHING = Schedule(0.0, 0.0, 0, None, ())


class WindowClock:
    """One thread for all GPUs: after each tick, closes a window on each GPU that wants them at
    every ``step`` until the next tick is near. The NVML calls run here, never on the event loop;
    a window on a GPU the tick is reading is skipped (the GPU's lock). A call that hangs holds this
    thread, and so the other GPUs' windows, until it returns: their ticks then read one mean each,
    as without windows, and the hung GPU is shown unresponsive by the tick's own reads."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._next: Schedule | None = None
        self._running = False  # a schedule is being worked through
        self._closed = False
        self._thread: threading.Thread | None = None

    def ticked(self, at: float, interval: float, nvml: Nvml, devices: Sequence[Device]) -> None:
        """A tick read the GPUs at ``at``, the next one due ``interval`` later."""
        n = windows_per_tick(interval)
        wanted = tuple(d for d in devices if d.gpm is not None and d.gpm.windowing and not d.lost)
        if n < 2 or not wanted:
            if self._running:  # no wake-up a tick while there is nothing to do
                self.pause()
            return
        with self._cond:
            self._next = Schedule(at, interval / n, n, nvml, wanted)
            self._cond.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="nvml-gpm-windows", daemon=True)
            self._thread.start()

    def pause(self) -> None:
        """Drop the schedule (NVML going down; no GPU wants windows)."""
        with self._cond:
            self._next = NOTHING
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        while (schedule := self._take()) is not None:
            nvml = schedule.nvml
            if nvml is None:
                continue
            for k in range(1, schedule.windows):
                if not self._wait_until(schedule.at + k * schedule.step):
                    break
                for dev in schedule.devices:
                    gpm = dev.gpm
                    if gpm is None or dev.lost:
                        continue
                    try:
                        gpm.window(nvml, dev)
                    except Exception:  # lost, or the driver failing: the tick's own reads find out
                        gpm.windowing = False

    def _take(self) -> Schedule | None:
        with self._cond:
            self._running = False
            while self._next is None and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            schedule, self._next = self._next, None
            self._running = schedule is not None and schedule.windows > 1
            return schedule

    def _wait_until(self, when: float) -> bool:
        """False where a new schedule (or close) came first."""
        with self._cond:
            while self._next is None and not self._closed:
                left = when - time.monotonic()
                if left <= 0:
                    return True
                self._cond.wait(left)
            return False
