"""The metrics port: the listening socket, its connection bounds, and the web config behind it.

:class:`HttpFace` binds once and keeps the socket for the process's life. The web config (TLS,
basic auth, headers, rate limit) is re-read when the file or a certificate, key or CA file it
names changes (polled every ``WATCH_SECONDS``), or on :meth:`reload` (SIGHUP, the control
socket's reload). A file that does not load is an error at start; on reload it is logged and the
running web config stays. Whether TLS is on is fixed at start, as in exporter-toolkit: with TLS on,
nothing is ever served in plaintext, and a reload that would turn it off (or on) is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.config.core import HttpSection
from agent.config.types import split_listen
from agent.exporter.auth import AuthDecision, AuthOutcome, BasicAuth, LogThrottle, request_limit
from agent.exporter.guard import Closed, ConnectionTable, Guard, Limits, Tls
from agent.exporter.handshake import HandshakeGate
from agent.exporter.http import EXPOSITION, Access, Advise, Exposition, ReportPage, make_app
from agent.exporter.tls import SwitchableContext, TlsError, allowed_san, build_context

if TYPE_CHECKING:
    from agent.config.webconfig import WebConfig

log = structlog.get_logger("http")

WATCH_SECONDS = 2.0
MAX_LINE_SIZE = 8190  # request line, and each header line: aiohttp's own default, stated here
MAX_FIELD_SIZE = 8190


class WebConfigInvalid(Exception):
    """The web config cannot be used; one readable line."""


@dataclass(frozen=True)
class Loaded:
    config: WebConfig
    ssl: ssl.SSLContext | None
    access: Access
    fingerprint: tuple[Any, ...]


def _fingerprint(path: str, cfg: WebConfig | None) -> tuple[Any, ...]:
    files = [path]
    if cfg is not None:
        t = cfg.tls_server_config
        files += [f for f in (t.cert_file, t.key_file, t.client_ca_file) if f]
    out: list[tuple[Any, ...]] = []
    for f in files:
        try:
            st = os.stat(f)
            out.append((f, st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError as e:
            out.append((f, e.errno))
    return tuple(out)


def load(path: str) -> Loaded:
    """Everything a web config needs, read and checked now; raises :class:`WebConfigInvalid`."""
    # here: its models cost an agent without a web config 0.7 MB (docs/architecture.md)
    from agent.config.webconfig import WebConfigError, load_web_config

    try:
        cfg = load_web_config(path)
        ctx = build_context(cfg.tls_server_config) if cfg.tls_server_config.enabled else None
    except WebConfigError as e:
        raise WebConfigInvalid(str(e)) from None
    except TlsError as e:
        raise WebConfigInvalid(f"{path}: tls_server_config: {e}") from None
    rl = cfg.rate_limit
    access = Access(
        auth=BasicAuth(cfg.basic_auth_users) if cfg.basic_auth_users else None,
        limiter=request_limit(rl.interval, rl.burst) if rl.interval > 0 else None,
        headers=dict(cfg.http_server_config.headers),
        excluded=frozenset(cfg.auth_excluded_paths),
    )
    return Loaded(cfg, ctx, access, _fingerprint(path, cfg))


class HttpFace:
    def __init__(
        self,
        http: HttpSection,
        registry: CollectorRegistry,
        health: Callable[[], str | None],
        status: Callable[[], dict[str, Any]] | None,
        version: str,
        degraded: Callable[[], str | None] = lambda: None,
        report: ReportPage | None = None,
        advice: Advise | None = None,
    ) -> None:
        self.http = http
        self._degraded = degraded
        self._report = report
        self._advice = advice
        self.limits = Limits(
            http.max_connections, http.header_timeout, http.idle_timeout, http.max_header_bytes
        )
        self.table = ConnectionTable(self.limits, self._peer_ok)
        self.loaded: Loaded | None = None
        self._switch: SwitchableContext | None = None
        self._runner: web.AppRunner | None = None
        self.exposition: Exposition | None = None
        self._server: asyncio.Server | None = None
        self._watch: asyncio.Task[None] | None = None
        self._throttle = LogThrottle()
        self.unauthorized: dict[AuthOutcome, int] = {}
        self.reloads = {"success": 0, "failure": 0}
        self.last_error: str | None = None
        self.loaded_at: float | None = None
        self._registry, self._health, self._status, self._version = registry, health, status, version

    @property
    def tls(self) -> bool:
        return self.loaded is not None and self.loaded.ssl is not None

    def _access(self) -> Access:
        return self.loaded.access if self.loaded else Access()

    def _peer_ok(self, transport: Any) -> bool:
        sans = self.loaded.config.tls_server_config.client_allowed_sans if self.loaded else None
        return sans is None or allowed_san(transport.get_extra_info("peercert"), sans)

    async def start(self) -> None:
        """Load the web config and bind; raises WebConfigInvalid or OSError."""
        if self.http.web_config:
            self.loaded = load(self.http.web_config)
            self.loaded_at = time.time()
        app = make_app(
            self._registry,
            self._health,
            self._status,
            self._version,
            access=self._access,
            table=self.table,
            on_unauthorized=self._log_unauthorized,
            degraded=self._degraded,
            report=self._report,
            advice=self._advice,
        )
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            keepalive_timeout=self.limits.idle_timeout,
            max_line_size=MAX_LINE_SIZE,
            max_field_size=MAX_FIELD_SIZE,
        )
        await self._runner.setup()
        self.exposition = app[EXPOSITION]
        if self.loaded is not None and self.loaded.ssl is not None:
            self._switch = SwitchableContext(self.loaded.ssl)
            gate = HandshakeGate(self.http.tls_handshake_rate, self.http.tls_handshake_burst)
            self.table.tls = Tls(self._switch, gate)
        host, port = split_listen(self.http.listen)
        server = self._runner.server
        assert server is not None
        try:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: Guard(server(), self.table),
                host or None,
                port,
                # no ssl= here: the guard starts each handshake itself, when the gate says so
                reuse_address=True,
                backlog=128,
            )
        except OSError:
            await self._runner.cleanup()
            raise
        if self.http.web_config:
            self._watch = asyncio.create_task(self._watch_files(), name="web-config-watch")
        log.info(
            "metrics port ready",
            scheme="https" if self.tls else "http",
            web_config=self.http.web_config or None,
            basic_auth=bool(self.loaded and self.loaded.access.auth),
            client_auth=self.loaded.config.tls_server_config.client_auth_type if self.loaded else None,
        )

    @property
    def bound_port(self) -> int | None:
        if self._server is None or not self._server.sockets:
            return None
        return int(self._server.sockets[0].getsockname()[1])

    async def reload(self) -> tuple[bool, str]:
        """Re-read the web config; on any problem keep the running one."""
        path = self.http.web_config
        if not path:
            return True, "no web config"
        try:
            new = await asyncio.to_thread(load, path)
            if (new.ssl is not None) != self.tls:
                raise WebConfigInvalid(
                    f"{path}: turning TLS {'on' if new.ssl else 'off'} needs a restart "
                    f"(the port is {'https' if self.tls else 'http'} for this process's life)"
                )
        except WebConfigInvalid as e:
            self.reloads["failure"] += 1
            self.last_error = str(e)
            # the fingerprint moves on: the same broken file is reported once, not every poll
            if self.loaded is not None:
                seen = _fingerprint(path, self.loaded.config)
                self.loaded = Loaded(self.loaded.config, self.loaded.ssl, self.loaded.access, seen)
            log.error("web config rejected; keeping the running one", problem=str(e))
            return False, str(e)
        old = self.loaded
        self.loaded = new
        if self._switch is not None and new.ssl is not None:
            self._switch.current = new.ssl
        if old is not None and old.access.auth is not None:
            old.access.auth.close()
        self.reloads["success"] += 1
        self.last_error = None
        self.loaded_at = time.time()
        log.info("web config reloaded", path=path, basic_auth_users=len(new.config.basic_auth_users))
        return True, "web config reloaded"

    async def _watch_files(self) -> None:
        path = self.http.web_config
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            if self.loaded is not None and _fingerprint(path, self.loaded.config) != self.loaded.fingerprint:
                await self.reload()

    def _log_unauthorized(self, request: web.Request, verdict: AuthDecision) -> None:
        self.unauthorized[verdict.outcome] = self.unauthorized.get(verdict.outcome, 0) + 1
        left_out = self._throttle.ready()
        if left_out is None:
            return
        peer = request.transport.get_extra_info("peername") if request.transport else None
        # what the client sent is never logged: neither the header nor a stranger's user name
        log.warning(
            "http request refused",
            status=429 if verdict.outcome is AuthOutcome.BUSY else 401,
            reason=str(verdict.outcome),
            user=verdict.user,
            path=request.path,
            remote=peer[0] if peer else None,
            similar_left_out=left_out,
        )

    def status(self) -> dict[str, Any]:
        cfg = self.loaded.config if self.loaded else None
        return {
            "listen": self.http.listen,
            "scheme": "https" if self.tls else "http",
            "web_config": self.http.web_config or None,
            "loaded_at": self.loaded_at,
            "reloads": dict(self.reloads),
            "last_error": self.last_error,
            "client_auth_type": cfg.tls_server_config.client_auth_type if cfg and self.tls else None,
            "basic_auth_users": sorted(cfg.basic_auth_users) if cfg else [],
            "auth_excluded_paths": list(cfg.auth_excluded_paths) if cfg else [],
            "limits": asdict(self.limits),
            "connections_open": len(self.table.guards),
            "connections_accepted": self.table.accepted,
            "connections_closed": {str(k): v for k, v in self.table.closed.items()},
            "tls_handshakes": self._handshakes(),
            "unauthorized": {str(k): v for k, v in self.unauthorized.items()},
        }

    def _handshakes(self) -> dict[str, int] | None:
        if self.table.tls is None:
            return None
        gate = self.table.tls.gate
        return {"started": gate.started, "deferred": gate.deferred, "waiting": gate.waiting}

    def metrics(self) -> Iterable[Metric]:
        g = GaugeMetricFamily("training_node_http_connections", "Open connections on the metrics port.")
        g.add_metric([], len(self.table.guards))
        yield g
        closed = CounterMetricFamily(
            "training_node_http_connections_closed",
            "Connections the metrics port closed or refused to bound abuse, by reason.",
            labels=["reason"],
        )
        for reason in Closed:
            closed.add_metric([str(reason)], self.table.closed.get(reason, 0))
        yield closed
        refused = CounterMetricFamily(
            "training_node_http_unauthorized",
            "Requests refused by basic auth (401) or for too many password checks at once (429), by reason.",
            labels=["reason"],
        )
        for outcome in AuthOutcome:
            if outcome is not AuthOutcome.OK:
                refused.add_metric([str(outcome)], self.unauthorized.get(outcome, 0))
        yield refused
        if self.exposition is not None:
            scrapes = CounterMetricFamily(
                "training_node_http_scrapes", "/metrics responses, by content encoding.", labels=["encoding"]
            )
            sent = CounterMetricFamily(
                "training_node_http_scrape_bytes",
                "/metrics body bytes sent, by content encoding.",
                labels=["encoding"],
            )
            for encoding, (n, size) in self.exposition.served.items():
                scrapes.add_metric([encoding], n)
                sent.add_metric([encoding], size)
            yield scrapes
            yield sent
        ok = GaugeMetricFamily(
            "training_node_web_config_last_reload_successful",
            "Whether the last (re)load of the web config file succeeded (1 when none is set).",
        )
        ok.add_metric([], 0.0 if self.last_error else 1.0)
        yield ok

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._server is not None:
            self._server.close()
        if self.table.tls is not None:
            self.table.tls.gate.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self.loaded is not None and self.loaded.access.auth is not None:
            self.loaded.access.auth.close()
