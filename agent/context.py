"""What the daemon hands each part it builds: the config, the bus, the newest snapshot and the
directories. It sits above the config and the snapshot, which ``core/`` never imports."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agent.config import Config
from agent.core.events import EventBus
from agent.snapshot import NodeSnapshot
from agent.sources.gpu.kmsg_reader import LogPosition


@dataclass
class Context:
    cfg: Config
    bus: EventBus
    latest: Callable[[], NodeSnapshot]  # the newest snapshot, never blocks
    state_dir: Path
    runtime_dir: Path
    # called with every new snapshot, on the event loop; parts that need each tick register here
    snapshot_listeners: list[Callable[[NodeSnapshot], None]]
    # how far this process has read the kernel log: kept across reloads, so none re-reads or skips
    kernel_log: LogPosition = field(default_factory=LogPosition)
