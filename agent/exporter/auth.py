"""Basic authentication against bcrypt hashes, the way exporter-toolkit does it, and its rate limit.

bcrypt costs tens of milliseconds on purpose. So, as in the toolkit, each (user, hash, password)
outcome is cached (bounded, keyed by a digest: the password itself is never stored), an unknown
user is checked against a fixed hash so timing does not tell users apart, and checks run one at a
time, here on a worker thread (bcrypt releases the GIL) so the event loop keeps serving scrapes.
A flood of fresh wrong passwords queues at most ``MAX_PENDING`` checks; beyond that the answer is
an immediate 429 instead of a growing queue.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum

from agent.core.tokens import TokenBucket

# bcrypt of a password nobody has, cost 10 like the toolkit's decoy
_DECOY = b"$2b$10$z6u4cMOIUWrJu6b6y0Gf7emwNWa/nTjR4HUxfn5ZFhJ7obOME/kxG"
CACHE_SIZE = 256
MAX_PENDING = 4


class AuthOutcome(StrEnum):
    OK = "ok"
    NO_CREDENTIALS = "no credentials"
    MALFORMED = "malformed credentials"
    UNKNOWN_USER = "unknown user"
    WRONG_PASSWORD = "wrong password"
    BUSY = "too many password checks in flight"


@dataclass(frozen=True)
class AuthDecision:
    outcome: AuthOutcome
    user: str | None = None  # only a configured user's name, never what a stranger typed

    @property
    def ok(self) -> bool:
        return self.outcome is AuthOutcome.OK


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """``Authorization: Basic base64(user:password)`` -> (user, password); None when absent or
    not Basic; raises ValueError when Basic but undecodable."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise ValueError("undecodable Basic credentials") from None
    user, sep, password = decoded.partition(":")
    if not sep:
        raise ValueError("Basic credentials without a colon")
    return user, password


class BasicAuth:
    def __init__(self, users: dict[str, str]) -> None:
        import bcrypt  # here: only an agent with basic auth users loads it

        self._checkpw = bcrypt.checkpw
        self.users = {u: h.encode() for u, h in users.items()}
        self._cache: OrderedDict[bytes, bool] = OrderedDict()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bcrypt")
        self._pending = 0

    @property
    def enabled(self) -> bool:
        return bool(self.users)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def check(self, header: str | None) -> AuthDecision:
        try:
            creds = parse_basic(header)
        except ValueError:
            return AuthDecision(AuthOutcome.MALFORMED)
        if creds is None:
            return AuthDecision(AuthOutcome.NO_CREDENTIALS)
        user, password = creds
        known = user in self.users
        hashed = self.users.get(user, _DECOY)
        key = hashlib.sha256(b"\0".join((user.encode(), hashed, password.encode()))).digest()
        ok = self._cache.get(key)
        if ok is None:
            if self._pending >= MAX_PENDING:
                return AuthDecision(AuthOutcome.BUSY)
            self._pending += 1
            try:
                loop = asyncio.get_running_loop()
                ok = await loop.run_in_executor(self._pool, self._checkpw, password.encode(), hashed)
            finally:
                self._pending -= 1
            ok = ok and known
            self._cache[key] = ok
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        if ok:
            return AuthDecision(AuthOutcome.OK, user)
        if known:
            return AuthDecision(AuthOutcome.WRONG_PASSWORD, user)
        return AuthDecision(AuthOutcome.UNKNOWN_USER)


def request_limit(interval: float, burst: int, clock: Callable[[], float] = time.monotonic) -> TokenBucket:
    """The toolkit's ``rate_limit``: one request per ``interval`` on average, ``burst`` at once."""
    return TokenBucket(burst, 1.0 / interval, clock)


class LogThrottle:
    """At most one line per ``every`` seconds for a noisy event; the next line says how many were
    left out, so a flood of 401s cannot fill the journal but is still visible."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self._last = -1e18
        self.suppressed = 0

    def ready(self, now: float | None = None) -> int | None:
        """None: stay quiet. Otherwise the number left out since the last line (and a line is due)."""
        now = time.monotonic() if now is None else now
        if now - self._last < self.every:
            self.suppressed += 1
            return None
        self._last = now
        n, self.suppressed = self.suppressed, 0
        return n
