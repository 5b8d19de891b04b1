"""The daemon: it builds the parts from the config (``build.py`` says which), runs them under
supervision, rebuilds them on a reload, serves the HTTP and control faces (its own metric families
are in ``metrics.py``), and speaks systemd's notify protocol. With ``build.py`` it is the only place
that wires parts together.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from agent import __version__
from agent.config import Config, ConfigError, load_config
from agent.context import Context
from agent.core.component import Component, HasPids, HasRoutes, HasStatus, HasVerdictLine
from agent.core.events import AgentLifecycleEvent, EventBus, event_to_dict
from agent.core.vocabulary import AgentPhase, TcpStatus
from agent.exporter import SnapshotExporter, make_registry
from agent.exporter.server import HttpFace, WebConfigInvalid
from agent.exporter.status import summarize, tcp_view
from agent.faults.collectors import CollectorFailureWatch
from agent.faults.gpu import gpus_missing
from agent.report.recorder import ReportRecorder
from agent.runtime.build import EMPTY, PidSource, build_collectors, build_components, build_renderers
from agent.runtime.control import ControlServer
from agent.runtime.metrics import PartMetrics
from agent.runtime.sampler import Sampler
from agent.runtime.sdnotify import Notifier
from agent.runtime.supervisor import Supervisor
from agent.snapshot import NodeSnapshot
from agent.sources.gpu.kmsg_reader import LogPosition
from agent.sources.gpu.part import GpuPart

log = structlog.get_logger("daemon")

SHUTDOWN_SECONDS = 4.0  # SIGTERM must end within 5 s with exit code 0


class StartupError(Exception):
    """A one-line reason the daemon cannot start (port in use, socket path not writable)."""


class Daemon:
    def __init__(self, cfg: Config, config_path: str | None) -> None:
        self.cfg = cfg
        self.config_path = config_path
        self.bus = EventBus()
        self.notifier = Notifier()
        # two lifetimes: what the process needs until it exits (the watchdog pings, the event
        # journal), and what the config owns, which a reload stops and builds anew
        self.lifetime = Supervisor()
        self.supervisor = Supervisor()
        self.registry = make_registry()
        self.started = time.monotonic()
        self.control = ControlServer(cfg.http.control_socket)
        self._stop = asyncio.Event()
        self.http: HttpFace | None = None
        self.sampler: Sampler | None = None
        self.components: list[Component] = []
        self._verdict_lines: list[HasVerdictLine] = []
        self.recent_events: list[dict[str, Any]] = []
        self._exporter = SnapshotExporter(self._latest, [])
        self.registry.register(self._exporter)
        self.registry.register(
            PartMetrics(lambda: self.components, lambda: self.http, self.bus, self.notifier)
        )
        self.reloads = 0
        self._kernel_log = LogPosition()  # the process's place in /dev/kmsg (reloads carry on from it)
        self._reload_lock = asyncio.Lock()  # a SIGHUP storm reloads one after another, never interleaved
        self._pending: set[asyncio.Task[Any]] = set()
        self._reload_queued = False  # a SIGHUP's reload waits for the one under way
        self._recent_q = self.bus.subscribe("recent")  # before anything can publish

    # --- wiring ------------------------------------------------------------------------------------

    def _latest(self) -> NodeSnapshot:
        return self.sampler.latest if self.sampler else EMPTY

    def _build(self) -> None:
        cfg = self.cfg
        self.state_dir = Path(cfg.agent.state_dir)
        self.runtime_dir = Path(cfg.agent.runtime_dir)
        for d in (self.state_dir, self.runtime_dir):
            d.mkdir(parents=True, exist_ok=True)
        pid_sources: list[PidSource] = []  # filled once the parts exist; the collector reads it each tick
        previous = self.sampler
        self.sampler = Sampler(
            build_collectors(cfg, self._latest, pid_sources),
            cfg.agent.interval,
            cfg.agent.collector_timeout,
            cfg.agent.stall_after,
        )
        if previous is not None:  # a reload: no scrape in between sees the empty snapshot
            self.sampler.carry_on(previous)
        # the exporter's renderers follow the config (a disabled collector's families go too)
        self._exporter.renderers = build_renderers(cfg)
        ctx = Context(
            cfg=cfg,
            bus=self.bus,
            latest=self._latest,
            state_dir=self.state_dir,
            runtime_dir=self.runtime_dir,
            snapshot_listeners=self.sampler.listeners,
            kernel_log=self._kernel_log,
        )
        self._bus_mark = self.bus.subscriber_count
        watch = CollectorFailureWatch(self.bus, self.sampler.failing_for, cfg.agent.collector_failing_after)
        self.sampler.listeners.append(watch.on_snapshot)
        self.components = [watch, *build_components(ctx)]
        pid_sources.extend(c.current_pids for c in self.components if isinstance(c, HasPids))
        # found once: a check against a runtime protocol walks its attributes each time
        self._verdict_lines = [c for c in self.components if isinstance(c, HasVerdictLine)]
        self.control.clear_routes(keep=("/status", "/reload", "/events"))
        for comp in self.components:
            for method, path, handler in comp.control_routes() if isinstance(comp, HasRoutes) else []:
                self.control.route(method, path, handler)

    def _start_workers(self) -> None:
        assert self.sampler is not None
        self.supervisor.start("sampler", self.sampler.run)
        for comp in self.components:
            self.supervisor.start(comp.name, comp.run)

    async def _stop_workers(self, deadline: float) -> None:
        # the loops go first (quickly), then the parts get most of the time to flush and persist
        await self.supervisor.stop(timeout=min(0.5, deadline / 4), forget=True)
        if self.components:
            stops = {asyncio.ensure_future(c.stop()): c for c in self.components}
            done, pending = await asyncio.wait(stops, timeout=max(0.1, deadline - 0.7))
            for fut in pending:
                log.warning("component did not stop in time", component=stops[fut].name)
                fut.cancel()
            for fut in done:
                if fut.exception() is not None:
                    log.error("component stop failed", component=stops[fut].name, exc_info=fut.exception())
        # subscriptions of the parts just stopped; a reload builds new ones
        self.bus.unsubscribe_from(self._bus_mark)
        if self.sampler:
            self.sampler.close()

    # --- faces -------------------------------------------------------------------------------------

    def health(self) -> str | None:
        return self.sampler.stall_reason() if self.sampler else "not started"

    def degraded(self) -> str | None:
        """Why the node's view lacks GPUs it had, while sampling goes on; None when it lacks none."""
        return gpus_missing(self._latest())

    def status(self) -> dict[str, Any]:
        snap = self._latest()
        out: dict[str, Any] = {
            "version": __version__,
            "uptime_seconds": round(time.monotonic() - self.started, 1),
            "healthy": self.health() is None,
            "health_reason": self.health(),
            "degraded": self.degraded(),
            "config": self.config_path,
            "reloads": self.reloads,
            "tasks": {n: vars(s) for sup in (self.lifetime, self.supervisor) for n, s in sup.states.items()},
            "http": self.http.status() if self.http else None,
            "snapshot": summarize(snap),
        }
        for comp in self.components:
            if isinstance(comp, HasStatus):
                try:
                    out[comp.name] = comp.status()
                except Exception as e:  # a broken status section must not break the endpoint
                    out[comp.name] = {"error": f"{type(e).__name__}: {e}"}
        out["recent_events"] = self.recent_events[-20:]
        return out

    async def report_page(self, since: float | None, job: str | None) -> str:
        """The report page for the metrics port (``/report``), from the part that keeps its timeline
        (none: the ledger is off), with no more than the TCP status shows."""
        for comp in self.components:
            if isinstance(comp, ReportRecorder):
                return await comp.page(since, job, network=True)
        raise ValueError("no report: [goodput] is disabled")

    def advice(self, job: str | None) -> dict[str, Any] | None:
        """/api/v1/advice: the advice part's answer (agent.advice), None while it is off."""
        for comp in self.components:
            advise = getattr(comp, "advise", None)
            if comp.name == "advice" and advise is not None:
                out: dict[str, Any] = advise(job, time.time())
                return out
        return None

    async def _bind(self) -> None:
        tcp_status = (
            (lambda: tcp_view(self.status())) if self.cfg.http.tcp_status == TcpStatus.REDACTED else None
        )
        self.http = HttpFace(
            self.cfg.http,
            self.registry,
            self.health,
            tcp_status,
            __version__,
            degraded=self.degraded,
            # the same exposure as the status: off with [http] tcp_status off, behind the same auth
            report=self.report_page if tcp_status is not None else None,
            advice=self.advice if tcp_status is not None else None,
        )
        try:
            await self.http.start()
        except WebConfigInvalid as e:
            raise StartupError(f"[http] web_config: {e}") from None
        except OSError as e:
            raise StartupError(f"cannot listen on {self.cfg.http.listen}: {e.strerror or e}") from None
        self.control.route("GET", "/status", self._control_status)
        self.control.route("POST", "/reload", self._control_reload)
        self.control.route("GET", "/events", self._control_events)
        try:
            await self.control.start()
        except OSError as e:
            await self.http.stop()
            raise StartupError(
                f"cannot create control socket {self.cfg.http.control_socket}: {e.strerror or e}"
            ) from None

    @property
    def bound_port(self) -> int | None:
        return self.http.bound_port if self.http else None

    async def _control_status(self, _: web.Request) -> web.Response:
        return web.json_response(self.status(), dumps=_json)

    async def _control_reload(self, _: web.Request) -> web.Response:
        ok, msg = await self.reload()
        return web.json_response({"ok": ok, "message": msg}, status=200 if ok else 400)

    async def _control_events(self, _: web.Request) -> web.Response:
        return web.json_response(self.recent_events, dumps=_json)

    # --- lifecycle ---------------------------------------------------------------------------------

    async def reload(self) -> tuple[bool, str]:
        """SIGHUP and the control socket's reload: agent.toml and the web config, each kept as it
        runs when its new version is invalid."""
        ok, msg = await self._reload_config()
        if self.http is None or not self.cfg.http.web_config:
            return ok, msg
        web_ok, web_msg = await self.http.reload()
        return ok and web_ok, f"{msg}; {web_msg}"

    async def _reload_config(self) -> tuple[bool, str]:
        if self.config_path is None:
            return False, "no config file to reload"
        async with self._reload_lock:
            self._reload_queued = False  # from here on, a new SIGHUP needs a reload of its own
            return await self._reload()

    async def _reload(self) -> tuple[bool, str]:
        assert self.config_path is not None
        try:
            new = load_config(self.config_path)
        except ConfigError as e:
            log.error("reload rejected; keeping the running config", problems=e.problems, path=e.path)
            return False, e.render()
        if new.http != self.cfg.http:
            log.warning("the [http] section changes only on restart", path=self.config_path)
            new = new.model_copy(update={"http": self.cfg.http})
        self.notifier.reloading()
        # only the config's parts stop: the watchdog keeps pinging and the journal keeps recording
        await self._stop_workers(SHUTDOWN_SECONDS)
        old, self.cfg = self.cfg, new
        try:
            self._build()
        except Exception as e:  # a part that cannot be built from the new config: back to the old one
            log.exception("reload failed; restoring the running config", path=self.config_path)
            self.cfg = old
            self._build()
            self._start_workers()
            self.notifier.ready(self._one_line())
            return False, f"reload failed, the running config is kept: {type(e).__name__}: {e}"
        self._start_workers()
        self.reloads += 1
        self.notifier.ready(self._one_line())
        log.info("config reloaded", path=self.config_path)
        return True, "reloaded"

    def _reload_soon(self) -> None:
        # a SIGHUP storm: the reload under way, and at most one queued behind it, which reads the
        # config as it is when it starts and so answers every signal that came in the meantime
        if self._reload_queued:
            log.debug("SIGHUP while a reload is queued: that one will read this config")
            return
        self._reload_queued = True
        task = asyncio.ensure_future(self.reload())
        self._pending.add(task)  # held until done: the loop keeps only a weak reference
        task.add_done_callback(self._pending.discard)

    def _one_line(self) -> str:
        snap = self._latest()
        gpu = snap.part(GpuPart)
        gpus = len(gpu.gpus) if gpu else 0
        failing = [n for n, s in snap.collectors.items() if not s.success and not s.absent]
        verdict = ""
        for comp in self._verdict_lines:
            verdict = f", {comp.verdict_line()}"
        return f"{gpus} GPUs, tick {snap.seq}{verdict}" + (
            f", failing: {','.join(failing)}" if failing else ""
        )

    async def _watchdog(self) -> None:
        period = (self.notifier.watchdog_seconds or 0) / 2
        while True:
            await asyncio.sleep(period or 5.0)
            healthy = self.health() is None
            if healthy and period:
                self.notifier.watchdog()
            self.notifier.status(self._one_line() if healthy else f"stalled: {self.health()}")

    async def _record_events(self) -> None:
        while True:
            ev = await self._recent_q.get()
            d = event_to_dict(ev)
            log.info("event", **{k: v for k, v in d.items() if k != "raw"})
            self.recent_events.append(d)
            del self.recent_events[:-100]

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self._build()
        await self._bind()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload_soon)
        self.lifetime.start("events", self._record_events)
        self._start_workers()
        self.lifetime.start("watchdog", self._watchdog)
        log.info(
            "agent started",
            version=__version__,
            listen=f"{self.cfg.http.listen.rpartition(':')[0]}:{self.bound_port}",
            control_socket=self.cfg.http.control_socket,
            pid=os.getpid(),
        )
        self.notifier.ready(f"listening on {self.cfg.http.listen}")
        self.bus.publish(AgentLifecycleEvent(phase=AgentPhase.STARTED, version=__version__))
        await self._stop.wait()
        log.info("stopping")
        self.notifier.stopping()
        self.bus.publish(AgentLifecycleEvent(phase=AgentPhase.STOPPING, version=__version__))
        await asyncio.sleep(0)  # let subscribers take the stopping event before their queues close
        try:
            async with asyncio.timeout(SHUTDOWN_SECONDS):
                await self._shutdown()
        except TimeoutError:
            log.warning("shutdown deadline passed; exiting anyway")
        return 0

    async def _shutdown(self) -> None:
        async with self._reload_lock:  # a reload under way finishes first
            await self._stop_workers(SHUTDOWN_SECONDS - 0.5)
        await self.lifetime.stop(timeout=0.2)
        await self.control.stop()
        if self.http is not None:
            await self.http.stop()
        self.notifier.close()


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, default=str)
