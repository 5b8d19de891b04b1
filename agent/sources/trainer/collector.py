"""The trainers' step reports, for the spans they carry (``tna_client.spans``), every tick.

A span rewrites its trainer's report as it begins and as it ends, so the agent looks every tick to
book an open save or evaluation as it passes (``agent.steps`` reads the same files for the step
figures, once a period). Each tick costs a listing and a ``stat`` per file: a file is read and parsed
again only when its modification time or size changed. Files are opened without following symlinks
and read up to a size limit (the folder is world-writable).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from agent.core.fsread import read_trainer_file
from agent.sources.trainer.parse import parse_said
from agent.sources.trainer.part import Said, TrainerPart

PATTERN = re.compile(r"^steps-(\d{1,10})\.json$")
MAX_BYTES = 16384
MAX_FILES = 256
STALE = 3600.0  # seconds: an evaluation or a save may run long without a report


class TrainerCollector:
    name = "trainer"
    part = "trainer"

    def __init__(self, directory: Path, procfs: str = "/proc") -> None:
        self.directory = directory
        self.procfs = procfs
        # name -> ((mtime_ns, size), what it said: a report, None (no spans), or why it is unusable)
        self._seen: dict[str, tuple[tuple[int, int], Said | str | None]] = {}

    def collect(self) -> TrainerPart:
        try:
            with os.scandir(self.directory) as it:
                entries = sorted((e for e in it if PATTERN.match(e.name)), key=lambda e: e.name)[:MAX_FILES]
        except OSError:
            entries = []
        seen: dict[str, tuple[tuple[int, int], Said | str | None]] = {}
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            stamp = (st.st_mtime_ns, st.st_size)
            old = self._seen.get(e.name)
            seen[e.name] = old if old is not None and old[0] == stamp else (stamp, self._parse(e.name))
        self._seen = seen
        now = time.time()
        said = tuple(s for _, s in seen.values() if isinstance(s, Said) and not self._gone(s, now))
        unusable = sum(1 for _, s in seen.values() if isinstance(s, str))
        return TrainerPart(said=said, unusable=unusable, read_at=time.time())

    def _gone(self, s: Said, now: float) -> bool:
        """A trainer that died inside a span leaves it open: its report, older than ``STALE`` and
        with no such process here, says nothing more (a trainer in another pid namespace rewrites
        its report at least every step period, and at each span's end)."""
        return now - s.time > STALE and not os.path.exists(os.path.join(self.procfs, str(s.pid)))

    def _parse(self, name: str) -> Said | str | None:
        try:
            said = parse_said(read_trainer_file(self.directory / name, MAX_BYTES))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            return e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        m = PATTERN.match(name)
        if said is not None and (m is None or int(m.group(1)) != said.pid):
            return "the pid in the name and in the report differ"
        return said

    def close(self) -> None:
        pass
