"""Xid critical errors, as NVML delivers them: an event set waited on in a daemon thread of its own.

NVML only hands out events through a blocking wait, so the wait runs with a timeout in a loop that
checks for ``stop()``; the sampling thread never blocks on it. The timeout is a second: each one that
passes wakes the thread (and takes the GIL) for nothing, and a wake costs more than the wait itself, so
four a second were a measurable share of the agent's CPU; ``stop()`` then takes up to that second.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pynvml
import structlog

from agent.core.backoff import Backoff
from agent.sources.gpu.binding import binding, error_text
from agent.sources.gpu.nvml import DRIVER_ERRORS, SKIP_ERRORS, Device, Nvml

log = structlog.get_logger("nvml")

XID = pynvml.nvmlEventTypeXidCriticalError


RETRY_BASE = 0.5  # seconds before the first retry of a failed event wait


class XidWatcher:
    def __init__(
        self, nvml: Nvml, on_xid: Callable[[Device, int], None], retry_max: float, wait_ms: int = 1000
    ) -> None:
        self._nvml = nvml
        self._retry = Backoff(min(RETRY_BASE, retry_max), retry_max)  # a failed wait, tried again
        self._on_xid = on_xid  # (GPU, xid), called on the watcher thread
        self._wait_ms = wait_ms
        self._stop = threading.Event()
        self._set: Any = None
        self._thread: threading.Thread | None = None
        self.watching: tuple[int, ...] = ()

    def start(self) -> bool:
        """Register every reachable GPU for Xid events and start waiting. False where the driver
        offers no events (vGPU guests, old drivers): Xid counts are then simply absent."""
        try:
            self._set = binding("nvmlEventSetCreate")()
        except pynvml.NVMLError as e:
            log.info("no NVML event set; Xid errors are not watched", reason=error_text(e))
            return False
        watching = []
        for dev in self._nvml.devices:
            if dev.lost or dev.handle is None:
                continue
            try:
                pynvml.nvmlDeviceRegisterEvents(dev.handle, XID, self._set)
                watching.append(dev.index)
            except pynvml.NVMLError as e:
                if e.value in DRIVER_ERRORS:
                    self._free()
                    raise
                level = log.info if e.value in SKIP_ERRORS else log.warning
                level("cannot watch Xid errors on this GPU", gpu=dev.index, reason=error_text(e))
        if not watching:
            self._free()
            return False
        self.watching = tuple(watching)
        self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait(self._set, self._wait_ms)
            except pynvml.NVMLError as e:
                if e.value == pynvml.NVML_ERROR_TIMEOUT:
                    self._retry.reset()
                    continue
                # the sampling side re-initialises NVML on driver errors and replaces this watcher
                wait = self._retry.next()
                log.warning("waiting for NVML events failed", error=error_text(e), retry_in=round(wait, 2))
                self._stop.wait(wait)
                continue
            except Exception:  # a bug here must not end Xid watching silently
                log.exception("Xid watcher failed")
                self._stop.wait(1.0)
                continue
            if data.eventType & XID:
                index = self._nvml.index_of(data.device)
                if index is None:
                    log.warning("Xid error from an unknown GPU handle", xid=int(data.eventData))
                    continue
                self._on_xid(self._nvml.devices[index], int(data.eventData))

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                # still inside the wait: freeing the set under it would be a use-after-free
                log.warning("Xid watcher did not stop in time; leaving its event set")
                return
        self._free()

    def _free(self) -> None:
        if self._set is None:
            return
        try:
            pynvml.nvmlEventSetFree(self._set)
        except pynvml.NVMLError as e:
            log.debug("nvmlEventSetFree failed", error=error_text(e))
        self._set = None
