"""The GPU collector as the daemon builds it: NVML's library is looked for first, and the binding
(nvidia-ml-py and the modules over it, ~2 MB of the daemon's RSS) is imported only once it is there.

A node without GPUs asks for ``libnvidia-ml.so.1`` every ``LOOK_SECONDS`` (a failed ``dlopen``
searches the loader's paths: ~90 us, a third of the idle agent's budget if asked every tick) and
reports the source absent meanwhile, with the reason the last look gave; once the library opens,
every call goes to the real :class:`GpuCollector`, backoff and re-initialisation included.
"""

from __future__ import annotations

import ctypes
import time
from typing import TYPE_CHECKING

from agent.sources import SourceAbsent
from agent.sources.gpu import SYSTEM_LIBRARY

if TYPE_CHECKING:
    from agent.sources.gpu.collector import GpuCollector
    from agent.sources.gpu.part import GpuPart

LOOK_SECONDS = 30.0  # a driver installed after the agent started is found within this


class NvmlProbe:
    name = "gpu"
    part = "gpu"

    def __init__(
        self, library: str, reinit_backoff_max: float, xid_events: bool, call_timeout: float = 2.0
    ) -> None:
        self._args = (library, reinit_backoff_max, xid_events, call_timeout)
        self.join_after = call_timeout  # the sampler's joining, as GpuCollector's
        self._collector: GpuCollector | None = None
        self._absent: tuple[float, str] | None = None  # (when to look again, why it is absent)

    def collect(self) -> GpuPart:
        if self._collector is None:
            now = time.monotonic()
            if self._absent is not None and now < self._absent[0]:
                raise SourceAbsent(self._absent[1])
            try:
                ctypes.CDLL(self._args[0] or SYSTEM_LIBRARY)
            except OSError as e:
                self._absent = (now + LOOK_SECONDS, f"no NVML library: {e}")
                raise SourceAbsent(self._absent[1]) from None
            from agent.sources.gpu.collector import GpuCollector

            self._collector = GpuCollector(*self._args)
        return self._collector.collect()

    def close(self) -> None:
        if self._collector is not None:
            self._collector.close()
