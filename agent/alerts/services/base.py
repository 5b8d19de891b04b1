"""What every chat channel module declares and provides, and the text fitting they share.

A channel turns a :class:`Message` into one HTTP request (``build``, signed at send time) and turns
the service's reply into an :class:`Outcome` (``judge``): delivered, worth retrying, or permanent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

import aiohttp

from agent.alerts.i18n import t
from agent.alerts.message import Message
from agent.alerts.render import mark
from agent.core.logsetup import redact_text
from agent.core.vocabulary import ChannelType, Style

MAX_REPLY_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Request:
    url: str
    body: bytes
    headers: dict[str, str] = field(
        default_factory=lambda: {"Content-Type": "application/json; charset=utf-8"}
    )


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: Mapping[str, str]  # lower-case names
    body: str


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    retryable: bool = False
    reason: str = (
        ""  # metric label: rate_limited config_error rejected http_4xx http_5xx network timeout bad_reply
    )
    code: str = ""  # the provider's code, e.g. "130101" or "HTTP 429"
    detail: str = ""  # the provider's own message, secrets redacted
    retry_after: float | None = None  # seconds, when the provider said

    def describe(self) -> str:
        if self.ok:
            return "delivered"
        kind = "retryable" if self.retryable else "permanent"
        code = f" {self.code}" if self.code else ""
        detail = f": {self.detail}" if self.detail else ""
        return f"{kind} {self.reason}{code}{detail}"


OK = Outcome(ok=True)

# each service's Channel subclass by its type, as the classes are defined (agent.alerts.services)
DECLARED: dict[str, type[Channel]] = {}


class Channel:
    """Base of every channel type. A service's module declares it once, by subclassing: its
    ``type``, the ``styles`` it lays messages out in (the first is the default), the ``rates`` the
    service accepts (``[[alerts.webhooks]] rate_limits`` unless set) and an ``example_url`` of the
    service's shape (docs/alerts-examples.md); and it implements ``build`` and ``judge``. A class
    that sets ``type`` and lacks one of them is refused when it is defined."""

    type: ClassVar[ChannelType]
    styles: ClassVar[tuple[Style, ...]]
    rates: ClassVar[tuple[str, ...]]  # "N/period": never more than N in any such period; () = none
    example_url: ClassVar[str]  # the service's URL shape with a made-up token, never a real one
    example_secret: ClassVar[str | None] = None  # the examples sign with it where the service signs
    # the receiver drops a message it already has: one whose delivery a kill -9 cut off may be sent
    # again. Chat services show it twice, so theirs are counted as outcome-unknown instead.
    idempotent: ClassVar[bool] = False

    def __init__(
        self,
        name: str,
        url: str,
        secret: str | None = None,
        style: str = "",
        title_prefix: str = "",
        link: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.url = url
        self.secret = secret
        self.style = style
        self.title_prefix = title_prefix
        self.link = link
        self.clock = clock  # wall clock for signatures

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "type" not in cls.__dict__:
            return  # a shared base, not a service
        lacks = [n for n in ("styles", "rates", "example_url") if n not in cls.__dict__]
        lacks += [n for n in ("build", "judge") if getattr(cls, n) is getattr(Channel, n)]
        if lacks or not cls.styles:
            raise TypeError(
                f"channel {cls.__name__} ({cls.type}) does not declare {', '.join(lacks or ['styles'])}"
            )
        DECLARED[cls.type] = cls

    def build(self, msg: Message) -> Request:
        raise NotImplementedError

    def judge(self, reply: Reply) -> Outcome:
        raise NotImplementedError

    # --- shared pieces ---

    def title(self, msg: Message, with_mark: bool = True) -> str:
        prefix = f"{self.title_prefix} " if self.title_prefix else ""
        return f"{prefix}{mark(msg) + ' ' if with_mark else ''}{msg.title}"

    def link_for(self, msg: Message) -> str | None:
        if not self.link:
            return None
        n = msg.node
        values = {"hostname": n.hostname, "instance_id": n.instance_id or "", "region": n.region or ""}
        try:
            return self.link.format(**values)
        except (KeyError, IndexError, ValueError):
            return self.link

    def plain(self, msg: Message, limit: int) -> str:
        """The message as plain text (the ``text`` styles)."""
        head = [self.title(msg), *(f"{label}: {value}" for label, value in msg.fields)]
        tail = [*hint_text(msg, bold=""), msg.footer]
        return assemble(head, [f"- {x}" for x in msg.lines], tail, limit, msg.language)

    def redacted_url(self) -> str:
        return redact_url(self.url)


def json_body(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def parse_json(reply: Reply) -> dict[str, Any] | None:
    try:
        data = json.loads(reply.body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def http_outcome(reply: Reply) -> Outcome | None:
    """The answer for statuses every service treats alike; None when the body decides."""
    if reply.status == 429:
        return Outcome(
            False, True, "rate_limited", "HTTP 429", snippet(reply.body), retry_after_seconds(reply.headers)
        )
    if reply.status == 408 or reply.status >= 500:
        reason = "http_5xx" if reply.status >= 500 else "timeout"
        return Outcome(False, True, reason, f"HTTP {reply.status}", snippet(reply.body))
    return None


def coded_outcome(
    code: object, detail: str, rate_limited: frozenset[int], config_errors: frozenset[int]
) -> Outcome:
    """A service's own result code: 0 is success, then its rate-limit and config-error codes; any
    other code is a permanent refusal of this message."""
    if code == 0:
        return OK
    if code in rate_limited:
        return Outcome(False, True, "rate_limited", str(code), detail)
    if code in config_errors:
        return Outcome(False, False, "config_error", str(code), detail)
    return Outcome(False, False, "rejected", str(code), detail)


def errcode_outcome(reply: Reply, rate_limited: frozenset[int], config_errors: frozenset[int]) -> Outcome:
    """DingTalk's and WeCom's way: HTTP 200 even on failure, ``{"errcode": N, "errmsg": "..."}``."""
    if (early := http_outcome(reply)) is not None:
        return early
    if reply.status != 200:
        return Outcome(False, False, "http_4xx", f"HTTP {reply.status}", snippet(reply.body))
    data = parse_json(reply)
    if data is None or "errcode" not in data:
        return Outcome(False, True, "bad_reply", "", snippet(reply.body))
    return coded_outcome(data["errcode"], snippet(str(data.get("errmsg", ""))), rate_limited, config_errors)


def snippet(text: str, limit: int = 300) -> str:
    return redact_text(" ".join(text.split()))[:limit]


def retry_after_seconds(headers: Mapping[str, str], *names: str) -> float | None:
    """``Retry-After`` (seconds or an HTTP date) or a provider's own reset header."""
    for name in (*names, "retry-after"):
        value = headers.get(name)
        if not value:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            continue
    return None


def truncate_utf8(text: str, limit: int, suffix: str = "…") -> str:
    """At most ``limit`` bytes of UTF-8, cut on a character boundary, ``suffix`` marking the cut."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    room = max(0, limit - len(suffix.encode()))
    # decoding a cut prefix with errors="ignore" drops only the partial character at its end
    return raw[:room].decode("utf-8", errors="ignore") + suffix


def utf8_size(text: str) -> int:
    return len(text.encode())


def fit_lines(
    lines: tuple[str, ...] | list[str],
    budget: int,
    lang: str,
    sep: str = "\n",
    size: Callable[[str], int] = utf8_size,
) -> list[str]:
    """As many whole lines as fit in ``budget`` (joined by ``sep``), then "… and N more" for the rest.

    ``size`` measures: UTF-8 bytes by default, characters where a service counts those (Slack)."""
    out: list[str] = []
    used = 0
    for i, line in enumerate(lines):
        rest = len(lines) - i - 1
        reserve = size(t("digest_more", lang, n=rest)) + size(sep) if rest else 0
        if used + size(line) + size(sep) + reserve > budget:
            out.append(t("digest_more", lang, n=len(lines) - i))
            return out
        out.append(line)
        used += size(line) + size(sep)
    return out


def assemble(
    head: list[str],
    bullets: list[str],
    tail: list[str],
    limit: int,
    lang: str,
    sep: str = "\n",
    line_sep: str = "\n",
) -> str:
    """``head``, as many ``bullets`` as fit, ``tail``: at most ``limit`` bytes of UTF-8."""
    used = sum(utf8_size(x) + utf8_size(sep) for x in (*head, *tail)) + utf8_size(sep)
    lines = fit_lines(bullets, limit - used, lang, sep=line_sep)
    parts = [sep.join(head), line_sep.join(lines), sep.join(tail)]
    return truncate_utf8(sep.join(p for p in parts if p), limit)


def hint_text(msg: Message, bold: str = "**") -> list[str]:
    """``💡 **Hint**: what to do`` as a one-item list, or nothing."""
    if not msg.hint:
        return []
    label, text = msg.hint
    return [f"💡 {bold}{label}{bold}: {text}" if bold else f"{label}: {text}"]


def redact_url(url: str) -> str:
    """``https://oapi.dingtalk.com/***?access_token=***``: host kept, path and values hidden."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "***"
    q = "&".join(f"{k}=***" for k, _ in parse_qsl(parts.query, keep_blank_values=True))
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    path = "/***" if parts.path not in ("", "/") else parts.path
    return f"{parts.scheme}://{netloc}{path}" + (f"?{q}" if q else "")


async def post(session: aiohttp.ClientSession, req: Request, timeout: float) -> Reply | Outcome:
    """One POST; transport failures come back as a retryable :class:`Outcome` (URL redacted)."""
    try:
        async with session.post(
            req.url,
            data=req.body,
            headers=req.headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
            allow_redirects=False,
        ) as resp:
            raw = await resp.content.read(MAX_REPLY_BYTES)
            headers = {k.lower(): v for k, v in resp.headers.items()}
            return Reply(resp.status, headers, raw.decode("utf-8", errors="replace"))
    except TimeoutError:
        return Outcome(False, True, "timeout", "", f"no answer within {timeout:g}s")
    except (aiohttp.ClientError, OSError, ValueError) as e:
        text = f"{type(e).__name__}: {e}".replace(req.url, redact_url(req.url))
        return Outcome(False, True, "network", "", redact_text(text)[:300])
