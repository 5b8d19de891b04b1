"""The demo's pacing (normal and ``--fast``) and its screen: timestamped, labelled lines."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Pace:
    telemetry_seconds: float  # how long the node is watched before the notice
    interval: str  # the agent's sampling interval
    poll: str  # the metadata poll interval
    save_seconds: float  # how long the toy checkpoint takes
    step_seconds: float
    print_every: int
    limit_seconds: float  # the whole demo, at most
    # the input-bound phase: the agent's [classifier] window, so that a verdict turns in seconds and
    # not in the minute a real node's window takes (two confirmations, one evaluation a second)
    window: float  # seconds
    decode_seconds: float  # the trainer's CPU work per batch while it decodes in-process
    data_seconds: float  # how long the data verdict stays on screen before the fix
    verdict_wait: float  # the longest any one verdict is waited for (a loaded box is slow)


NORMAL = Pace(14.0, "1s", "1s", 4.0, 0.1, 25, 240.0, 8.0, 0.5, 5.0, 60.0)
FAST = Pace(3.0, "500ms", "500ms", 1.0, 0.05, 40, 180.0, 5.0, 0.3, 0.0, 45.0)


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


def telemetry_line(st: dict[str, Any]) -> str:
    """One line of what the agent sees (its GET /status): the GPUs, the host CPU, the verdict."""
    snap = st.get("snapshot", {})
    parts = []
    gpus = snap.get("gpus") or []
    if gpus:
        n = len(gpus)
        util = sum(g.get("utilization_ratio") or 0 for g in gpus) / n
        power = sum(g.get("power_watts") or 0 for g in gpus) / n
        temp = max(g.get("temperature_celsius") or 0 for g in gpus)
        procs = {p["pid"] for g in gpus for p in g.get("processes", [])}
        model = gpus[0]["model"].replace("NVIDIA ", "")
        parts.append(
            f"{n}× {model}  util {util * 100:3.0f}%  {power:3.0f} W/GPU  {temp:2.0f} °C  "
            f"compute procs {len(procs)}"
        )
    host = snap.get("host")
    if host and host.get("cpu_busy_ratio") is not None:
        parts.append(f"cpu {host['cpu_busy_ratio'] * 100:3.0f}%")
    verdict = ((st.get("classifier") or {}).get("lines") or [""])[0].strip()
    if verdict and "pending" not in verdict:
        parts.append(verdict[:60])
    return "  ·  ".join(parts) or "waiting for the first snapshot"
