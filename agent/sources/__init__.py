"""Sources of telemetry: one small module per source behind the :class:`Collector` interface.

A collector's ``collect()`` is a plain blocking call run in a worker thread by the sampler, with a
timeout. It returns its part of the snapshot or raises; it knows nothing about what consumes it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


class SourceAbsent(Exception):
    """The source does not exist on this node (no NVML library, no GPU, no /proc/pressure).

    Not a failure: the collector reports itself absent, says why once, and the agent keeps going."""


@runtime_checkable
class Collector(Protocol):
    name: str
    # the registered source whose part this collector returns (agent.sources.registry)
    part: str

    def collect(self) -> Any:
        """Return the part (the frozen dataclass in its folder's ``part.py``). Blocking; runs off the loop.
        Never called again while a call runs, unless the collector has a ``join_after`` (seconds):
        then a call running that long is joined by a new one, and the old one's outcome dropped."""

    def close(self) -> None:
        """Release handles (NVML shutdown, file descriptors). Called once on shutdown."""
