"""Building a channel from its ``[[alerts.webhooks]]`` table: its secrets resolved, its class the
one its service declares (:mod:`agent.alerts.services`)."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from agent.alerts.services import channel_class
from agent.alerts.services.base import Channel
from agent.config.alerts import WebhookChannel
from agent.core.logsetup import register_secret


def register_url(url: str) -> None:
    """The whole URL, its query values (DingTalk's access_token, WeCom's key) and long path segments
    (Feishu's hook id, Slack's T/B/secret path) become secrets for log redaction."""
    register_secret(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    for _, value in parse_qsl(parts.query):
        register_secret(value)
    if len(parts.path) >= 16:
        register_secret(parts.path)
    for segment in parts.path.split("/"):
        if len(segment) >= 16:
            register_secret(segment)


def build_channel(cfg: WebhookChannel) -> Channel:
    """Resolve the channel's secrets and build it. Raises ``ValueError`` naming the problem, never a
    secret's value (an unset environment variable, an unreadable file, a URL that isn't http)."""
    url = cfg.url.resolve()
    register_url(url)
    if not url.startswith(("http://", "https://")):
        raise ValueError("url must be an http:// or https:// URL")
    secret = cfg.secret.resolve() if cfg.secret is not None else None
    register_secret(secret)
    return channel_class(cfg.type)(
        cfg.name, url, secret, style=cfg.effective_style, title_prefix=cfg.title_prefix, link=cfg.link
    )
