"""structlog: JSON lines for journald, a console renderer on a TTY, and redaction of secrets.

Redaction works two ways: values registered with :func:`register_secret` (every resolved webhook
secret and token) are replaced wherever they appear, and URL query parameters and keys that look
secret (``access_token``, ``sign``, ``key``, ``token``, ``secret``) are masked by pattern.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

import structlog

from agent.core.vocabulary import LogFormat

_secrets: set[str] = set()
_SECRET_KEYS = re.compile(r"(secret|token|password|passwd|sign(ature)?|api[_-]?key|authorization)$", re.I)
_URL_PARAM = re.compile(
    r"([?&](?:access_token|token|key|sign|signature|secret|timestamp_sign)=)[^&\s\"']+", re.I
)
# Slack and generic webhook URLs carry the secret in the path
_URL_PATH_SECRET = re.compile(
    r"(hooks\.slack\.com/services/|/open-apis/bot/v2/hook/|/cgi-bin/webhook/send\?key=)[^\s\"'&]+", re.I
)
MASK = "***"


def register_secret(value: str | None) -> None:
    """Remember a secret so that any log line containing it is redacted."""
    if value and len(value) >= 4:
        _secrets.add(value)


def redact_text(text: str) -> str:
    for s in sorted(_secrets, key=len, reverse=True):
        if s in text:
            text = text.replace(s, MASK)
    text = _URL_PARAM.sub(lambda m: m.group(1) + MASK, text)
    return _URL_PATH_SECRET.sub(lambda m: m.group(1) + MASK, text)


def _redact_value(key: str, value: Any) -> Any:
    if isinstance(value, str):
        return MASK if _SECRET_KEYS.search(key) and value else redact_text(value)
    if isinstance(value, dict):
        return {k: _redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(key, v) for v in value]
    return value


def redact_processor(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    return {k: _redact_value(k, v) for k, v in event_dict.items()}


def _redact_rendered(_logger: Any, _method: str, rendered: Any) -> Any:
    # a last pass over the final line catches secrets inside rendered tracebacks
    return redact_text(rendered) if isinstance(rendered, str) else rendered


def setup_logging(level: str = "info", fmt: str = LogFormat.AUTO, stream: Any = None) -> None:
    stream = stream or sys.stdout
    console = fmt == LogFormat.CONSOLE or (fmt == LogFormat.AUTO and stream.isatty())
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=stream.isatty())
        if console
        else structlog.processors.JSONRenderer(sort_keys=False)
    )
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if not console:
        processors.append(structlog.processors.format_exc_info)
    processors += [redact_processor, renderer, _redact_rendered]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    # third-party libraries using stdlib logging (aiohttp) go through the same redaction
    logging.basicConfig(level=logging.WARNING, stream=stream, format="%(levelname)s %(name)s %(message)s")
    for h in logging.getLogger().handlers:
        h.addFilter(_StdlibRedact())


class _StdlibRedact(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact_text(record.getMessage())
        record.args = None
        return True
