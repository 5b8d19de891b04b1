"""The demo's pacing (normal and ``--fast``) and its screen: timestamped, labelled lines."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Pace:
    telemetry_seconds: float  # how long the node is watched before the notice
    interval: str  # the agent's sampling interval
    poll: str  # the metadata poll interval
    save_seconds: float  # how long the toy checkpoint takes
    step_seconds: float
    print_every: int
    limit_seconds: float  # the whole demo, at most


NORMAL = Pace(14.0, "1s", "1s", 4.0, 0.1, 25, 120.0)
FAST = Pace(3.0, "500ms", "500ms", 1.0, 0.05, 40, 60.0)


class Screen:
    """Timestamped, labelled lines; colour only on a terminal."""

    COLORS = {"demo": "1;37", "node": "36", "cloud": "1;33", "agent": "1;35", "trainer": "32", "fail": "1;31"}

    def __init__(self, color: bool) -> None:
        self.color = color
        self.t0 = time.monotonic()

    def paint(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def say(self, who: str, text: str) -> None:
        stamp = f"{time.monotonic() - self.t0:6.1f}s"
        label = self.paint(f"{who:<7}", self.COLORS.get(who, "0"))
        print(f"{self.paint(stamp, '2')}  {label} │ {text}", flush=True)

    def block(self, text: str) -> None:
        print(text, flush=True)


class DemoFailed(Exception):
    pass
