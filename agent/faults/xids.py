"""Each Xid counted once, whichever source saw it first.

NVML's event set and the kernel log report the same errors: a GPU's Xid 79 reaches the agent as an
NVML event and as an ``NVRM: Xid`` line. Each source counts the occurrences of one (GPU, Xid) it has
seen; an occurrence is new when a source's count passes the number already published. Two sources that
each saw one Xid 79 on GPU 2 publish one event; a second Xid 79, seen by either, publishes a second.
"""

from __future__ import annotations

from collections import Counter
from enum import StrEnum


class XidSource(StrEnum):
    NVML = "nvml"  # nvmlEventSetWait's Xid critical error events
    KERNEL_LOG = "kernel-log"  # the driver's NVRM: Xid lines in /dev/kmsg


class XidTally:
    def __init__(self) -> None:
        self._seen: dict[XidSource, Counter[tuple[int, int]]] = {s: Counter() for s in XidSource}
        self._published: Counter[tuple[int, int]] = Counter()

    def seen(self, gpu: int, xid: int, source: XidSource, count: int = 1) -> int:
        """Add ``count`` occurrences seen by ``source``; returns how many of them are new."""
        key = (gpu, xid)
        self._seen[source][key] += count
        most = max(seen[key] for seen in self._seen.values())
        new = most - self._published[key]
        if new > 0:
            self._published[key] = most
        return max(new, 0)

    def by_source(self) -> dict[str, int]:
        return {str(s): sum(seen.values()) for s, seen in self._seen.items()}
