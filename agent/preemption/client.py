"""HTTP to a metadata service: one request budget, a hard timeout, bounded bodies, session tokens,
and every attempt counted by outcome.

Outcomes (the ``outcome`` label of ``training_node_metadata_requests_total``): ``ok``, ``not_found``
(404: nothing scheduled), ``unauthorized`` (401/403), ``client_error`` (other 4xx), ``server_error``
(5xx), ``timeout``, ``connection_error``, ``bad_body`` (too large or unreadable), ``token_error``
(the token endpoint failed).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import structlog

from agent import __version__
from agent.core.vocabulary import ANSWERED, RequestOutcome
from agent.preemption.wire import BodyFormatError, MetadataError, TokenScheme

log = structlog.get_logger("preemption.client")


@dataclass(frozen=True)
class Response:
    status: int
    text: str
    headers: Mapping[str, str]
    parsed: Any = None  # what the ``parse`` function made of a 2xx body


@dataclass
class RequestCounter:
    """Shared by the watcher's metrics: attempts by (provider, outcome), last success wall time."""

    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    last_success: dict[str, float] = field(default_factory=dict)

    def count(self, provider: str, outcome: str) -> None:
        key = (provider, outcome)
        self.counts[key] = self.counts.get(key, 0) + 1
        if outcome in ANSWERED:
            self.last_success[provider] = time.time()

    def total(self) -> int:
        return sum(self.counts.values())


SLACK_SECONDS = 0.05


class RateLimiter:
    """At most ``rate`` requests in any one-second window over every request of the watcher (Alibaba
    throttles heavy metadata use): a sliding window, so the burst after an outage, when every source
    retries and GCP's long-polls and the identity reads start again, stays inside the budget too (a
    token bucket would allow its burst on top of the rate). A rate under 1 means one request per
    ``1 / rate`` seconds."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.count = max(1, int(rate))
        # ``count`` requests per ``window`` seconds, plus a little: a request that waited longer for its
        # connection (the first after an outage) must not land inside the next one's window at the service
        self.window = self.count / rate + SLACK_SECONDS
        self._sent: deque[float] = deque()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            while True:
                now = time.monotonic()
                while self._sent and self._sent[0] <= now - self.window:
                    self._sent.popleft()
                if len(self._sent) < self.count:
                    self._sent.append(now)
                    return
                await asyncio.sleep(self._sent[0] + self.window - now)


def _outcome_for(status: int) -> RequestOutcome:
    if 200 <= status < 300:
        return RequestOutcome.OK
    if status == 404:
        return RequestOutcome.NOT_FOUND
    if status in (401, 403):
        return RequestOutcome.UNAUTHORIZED
    if status >= 500:
        return RequestOutcome.SERVER_ERROR
    return RequestOutcome.CLIENT_ERROR


class MetadataClient:
    TOKENLESS_RETRY_SECONDS = 60.0  # after a failed token fetch, how long tokenless reads go on

    def __init__(
        self,
        session: aiohttp.ClientSession,
        provider: str,
        base_url: str,
        *,
        timeout: float,
        max_body: int,
        limiter: RateLimiter,
        counter: RequestCounter,
        headers: Mapping[str, str] | None = None,
        token: TokenScheme | None = None,
        token_ttl: int = 3600,
        allow_tokenless: bool = False,
    ) -> None:
        self.session = session
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_body = max_body
        self.limiter = limiter
        self.counter = counter
        self.headers = {"User-Agent": f"training-node-agent/{__version__}", **(headers or {})}
        self.token_scheme = token
        self.token_ttl = int(token_ttl)
        self.allow_tokenless = allow_tokenless
        self._token: str | None = None
        self._token_expires = 0.0
        self._tokenless_until = 0.0
        self._token_lock = asyncio.Lock()
        self.token_state = "none" if token is None else "not fetched"
        self.token_fetches = 0

    # --- tokens ------------------------------------------------------------------------------------

    def _refresh_margin(self) -> float:
        return max(1.0, min(60.0, self.token_ttl * 0.1))

    async def _token_headers(self) -> dict[str, str]:
        scheme = self.token_scheme
        if scheme is None:
            return {}
        async with self._token_lock:
            now = time.monotonic()
            if self._token is not None and now < self._token_expires - self._refresh_margin():
                return {scheme.token_header: self._token}
            if now < self._tokenless_until:
                return {}
            try:
                self._token, ttl = await self._fetch_token(scheme)
            except MetadataError as e:
                self._token = None
                if e.outcome != RequestOutcome.TOKEN_ERROR:
                    raise  # unreachable service: a tokenless read would fail the same way
                if not self.allow_tokenless:
                    self.token_state = f"token endpoint failed: {e}"
                    raise
                self._tokenless_until = now + self.TOKENLESS_RETRY_SECONDS
                self.token_state = f"tokenless fallback (token endpoint failed: {e})"
                log.warning(
                    "metadata token endpoint failed; reading without a token as configured",
                    provider=self.provider,
                    error=str(e),
                )
                return {}
            self._token_expires = time.monotonic() + ttl
            self.token_state = f"token valid {ttl} s"
            return {scheme.token_header: self._token}

    async def _fetch_token(self, scheme: TokenScheme) -> tuple[str, int]:
        self.token_fetches += 1
        try:
            resp = await self._send(
                "PUT", scheme.path, headers={scheme.ttl_header: str(self.token_ttl)}, count=False
            )
        except MetadataError as e:
            # the service is down, not the token
            if e.outcome in (RequestOutcome.CONNECTION_ERROR, RequestOutcome.TIMEOUT):
                self.counter.count(self.provider, e.outcome)
                raise
            self.counter.count(self.provider, RequestOutcome.TOKEN_ERROR)
            raise MetadataError(RequestOutcome.TOKEN_ERROR, f"token request: {e}", e.status) from None
        token = resp.text.strip()
        if not 200 <= resp.status < 300 or not token or len(token) > 1024 or any(c.isspace() for c in token):
            self.counter.count(self.provider, RequestOutcome.TOKEN_ERROR)
            what = f"HTTP {resp.status}" if not 200 <= resp.status < 300 else "an unusable token body"
            raise MetadataError(RequestOutcome.TOKEN_ERROR, f"token request got {what}", resp.status)
        self.counter.count(self.provider, RequestOutcome.OK)
        ttl = self.token_ttl
        granted = resp.headers.get(scheme.ttl_header, "")
        if granted.isdigit() and 0 < int(granted) <= ttl:
            ttl = int(granted)
        return token, ttl

    def invalidate_token(self) -> None:
        self._token = None
        self._tokenless_until = 0.0

    # --- requests ----------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
        timeout: float | None = None,
        parse: Callable[[str], Any] | None = None,
    ) -> Response:
        """One read. Returns 2xx and 404 responses; raises :class:`MetadataError` for everything else.
        A 401/403 with a session token fetches a new token and tries once more. ``parse`` turns a 2xx
        body into ``Response.parsed``; a :class:`BodyFormatError` from it counts as ``bad_body``."""
        for attempt in (1, 2):
            token_headers = await self._token_headers()
            resp = await self._send(
                method,
                path,
                params=params,
                json_body=json_body,
                timeout=timeout,
                headers=token_headers,
                parse=parse,
            )
            outcome = _outcome_for(resp.status)
            if outcome == RequestOutcome.UNAUTHORIZED and self.token_scheme is not None and attempt == 1:
                # an expired or revoked token (or a service that now requires one): fetch anew
                self.invalidate_token()
                continue
            if outcome in ANSWERED:
                return resp
            raise MetadataError(
                outcome, f"{method} {path}: HTTP {resp.status} {_snippet(resp.text)}", resp.status
            )
        raise AssertionError("unreachable")

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
        timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
        count: bool = True,
        parse: Callable[[str], Any] | None = None,
    ) -> Response:
        await self.limiter.acquire()
        url = self.base_url + path
        limit = timeout if timeout is not None else self.timeout
        outcome: str = RequestOutcome.OK
        try:
            async with asyncio.timeout(limit):
                async with self.session.request(
                    method,
                    url,
                    params=params,
                    json=json_body,
                    headers={**self.headers, **(headers or {})},
                    allow_redirects=False,
                ) as r:
                    body = await self._read_body(r)
                    status, resp_headers = r.status, r.headers.copy()  # names stay case-blind
            outcome = _outcome_for(status)
            parsed = None
            if parse is not None and outcome == RequestOutcome.OK:
                try:
                    parsed = parse(body)
                except BodyFormatError as e:
                    outcome = RequestOutcome.BAD_BODY
                    raise MetadataError(RequestOutcome.BAD_BODY, f"{method} {path}: {e}", status) from None
            return Response(status, body, resp_headers, parsed)
        except TimeoutError:
            outcome = RequestOutcome.TIMEOUT
            raise MetadataError(
                RequestOutcome.TIMEOUT, f"{method} {path}: no answer within {limit:g} s"
            ) from None
        except MetadataError as e:
            outcome = e.outcome
            raise
        except (aiohttp.ClientError, OSError) as e:
            outcome = RequestOutcome.CONNECTION_ERROR
            raise MetadataError(RequestOutcome.CONNECTION_ERROR, f"{method} {path}: {_describe(e)}") from None
        finally:
            if count:
                self.counter.count(self.provider, outcome)

    async def _read_body(self, r: aiohttp.ClientResponse) -> str:
        declared = r.content_length
        if declared is not None and declared > self.max_body:
            raise MetadataError(
                RequestOutcome.BAD_BODY, f"body of {declared} bytes exceeds the {self.max_body} byte limit"
            )
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = await r.content.read(65536)
            if not chunk:
                break
            size += len(chunk)
            if size > self.max_body:
                raise MetadataError(RequestOutcome.BAD_BODY, f"body exceeds the {self.max_body} byte limit")
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")


def _snippet(text: str) -> str:
    t = " ".join(text.split())
    return (t[:120] + "...") if len(t) > 120 else t


def _describe(e: BaseException) -> str:
    if isinstance(e, aiohttp.ClientConnectorError):
        return f"cannot connect to {e.host}:{e.port}: {e.os_error.strerror or e.os_error}"
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}" if type(e).__name__ not in text else text
