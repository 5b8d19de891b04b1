"""The trainer source's snapshot part: each training process's own word on its pauses, as its last
step report gave them (``tna_client.spans``). Wall-clock seconds: the trainer and the agent share the
node's clock, not a monotonic one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from agent.core.vocabulary import TrainerSpan


@dataclass(frozen=True, slots=True)
class Said:
    pid: int
    rank: int
    local_rank: int | None
    time: float  # unix seconds of the report
    totals: dict[TrainerSpan, tuple[int, float]]  # kind -> (count, seconds) since the trainer started
    # the last checkpoint and evaluation spans: (kind, start, end); end None while it lasts
    recent: tuple[tuple[TrainerSpan, float, float | None], ...]

    @property
    def order(self) -> tuple[int, int]:
        """The node's figures follow its lowest local rank (as ``agent.steps.figures`` does)."""
        return (self.local_rank if self.local_rank is not None else self.rank, self.rank)


@dataclass(frozen=True, slots=True)
class TrainerPart:
    source: ClassVar[str] = "trainer"

    said: tuple[Said, ...]  # by pid; only reports that carry spans (a client that knows them)
    unusable: int  # report files that could not be read or parsed this tick
    read_at: float  # unix seconds
