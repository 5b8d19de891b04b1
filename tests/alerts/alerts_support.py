"""Helpers for the alert tests: config, a running in-process Alerter, waiting without blocking."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.alerts.alerter import Alerter
from agent.config import Config, parse_config
from agent.context import Context
from agent.core.events import EventBus
from agent.snapshot import NodeSnapshot
from agent.sources.gpu.part import GpuPart, GpuStats

FAST = {"backoff_initial": "50ms", "backoff_max": "200ms", "flush_timeout": "1s"}


def gpu_snapshot(n: int = 8, model: str = "NVIDIA A100-SXM4-80GB") -> NodeSnapshot:
    gpus = tuple(GpuStats(index=i, uuid=f"GPU-{i:08x}-0000", model=model, up=True) for i in range(n))
    return NodeSnapshot(
        seq=1, timestamp=time.time(), monotonic=time.monotonic(), gpu=GpuPart("550.54", "12.550", gpus)
    )


def config(tmp_path: Path, webhooks: list[dict[str, Any]], **alerts: Any) -> Config:
    return parse_config(
        {
            "agent": {"state_dir": str(tmp_path / "state"), "runtime_dir": str(tmp_path / "run")},
            "alerts": {**FAST, **alerts, "webhooks": webhooks},
        }
    )


def context(cfg: Config, bus: EventBus | None = None, snapshot: NodeSnapshot | None = None) -> Context:
    snap = snapshot or gpu_snapshot()
    return Context(
        cfg=cfg,
        bus=bus or EventBus(),
        latest=lambda: snap,
        state_dir=Path(cfg.agent.state_dir),
        runtime_dir=Path(cfg.agent.runtime_dir),
        snapshot_listeners=[],
    )


class Running:
    """``async with Running(cfg) as (alerter, bus)``: the component running as the daemon runs it."""

    def __init__(self, cfg: Config, snapshot: NodeSnapshot | None = None) -> None:
        self.ctx = context(cfg, snapshot=snapshot)
        self.alerter = Alerter(self.ctx)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> tuple[Alerter, EventBus]:
        self._task = asyncio.create_task(self.alerter.run())
        return self.alerter, self.ctx.bus

    async def __aexit__(self, *exc: object) -> None:
        await self.alerter.stop()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    # imported here: bench/soak.py imports this module for ``represented``, without the suite's conftest
    from conftest import async_wait_until

    return await async_wait_until(predicate, timeout, what=what)


def message_text(payload: dict[str, Any]) -> str:
    """Everything a person would read in one accepted payload, whatever the service."""
    return json.dumps(payload, ensure_ascii=False)


_DIGEST = re.compile(r"(\d+) alerts on |告警汇总：共 (\d+) 条")


def represented(payloads: list[dict[str, Any]]) -> int:
    """How many alerts the accepted messages stand for: a digest says its count in its title."""
    total = 0
    for p in payloads:
        m = _DIGEST.search(message_text(p))
        total += int(m.group(1) or m.group(2)) if m else 1
    return total


def counter(alerter: Alerter, family: str, **labels: str) -> float:
    for metric in alerter.metrics():
        for s in metric.samples:
            if s.name == family and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0
