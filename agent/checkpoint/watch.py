"""The checkpoint targets as last seen: discovery every ``discover_interval``, each target's
handler state for the configured signal, and the notes trainers left beside the request file."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import structlog

from agent.checkpoint.publish import trainer_notes
from agent.checkpoint.signals import handler_state
from agent.checkpoint.targets import Discovered, Discovery, Target, age_seconds
from agent.config.trainer import TrainerSection
from agent.context import Context
from agent.core.vocabulary import HandlerState
from agent.sources.gpu.part import GpuPart

log = structlog.get_logger("checkpoint")


class TargetWatch:
    def __init__(self, ctx: Context, tcfg: TrainerSection, signum: int, request_file: Path) -> None:
        self.ctx = ctx
        self.tcfg = tcfg
        self.signum = signum
        self.procfs = ctx.cfg.agent.procfs
        self.request_file = request_file
        self.discovery = Discovery(
            list(tcfg.discover), self.procfs, ctx.cfg.agent.sysfs, gpu_pids=self._gpu_pids
        )
        self.found = Discovered(())
        self.handlers: dict[int, HandlerState] = {}  # pid -> handler state for the configured signal
        self.trainers: list[dict[str, Any]] = []  # processes that found the request file (their notes)
        self._logged: list[str] = []

    def _gpu_pids(self) -> list[int]:
        snap = self.ctx.latest()
        gpu = snap.part(GpuPart)
        if gpu is None:
            return []
        return [p.pid for g in gpu.gpus for p in g.processes]

    async def refresh_loop(self) -> None:
        while True:
            await self.rediscover()
            await asyncio.sleep(self.tcfg.discover_interval)

    async def rediscover(self) -> Discovered:
        # one thread hop for all of it: /proc and the request folder are read together
        found, handlers, shown, trainers = await asyncio.to_thread(self._look)
        if shown != self._logged:
            self._logged = shown
            log.info("checkpoint targets", targets=shown, problems=list(found.problems))
        self.found, self.handlers = found, handlers
        self.trainers = trainers
        return found

    def _look(self) -> tuple[Discovered, dict[int, HandlerState], list[str], list[dict[str, Any]]]:
        found = self.discovery.discover()
        handlers = {t.pid: handler_state(self.procfs, t.pid, self.signum) for t in found.targets}
        shown = [
            f"{t.describe()} via {t.source}, {self._shown(t, handlers.get(t.pid))}" for t in found.targets
        ]
        return found, handlers, shown, trainer_notes(self.request_file.parent, self.procfs)

    def _shown(self, t: Target, state: HandlerState | None) -> str:
        """The handler state for the log: a young process without one is still starting (frameworks
        install their handler after imports and set-up), not a target that would be killed."""
        if state == HandlerState.NO_HANDLER:
            age = age_seconds(self.procfs, t)
            if age is not None and age < self.tcfg.startup_grace:
                return f"starting ({age:.0f} s old, no handler yet)"
        return str(state)
