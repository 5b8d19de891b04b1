"""[alerts] and [[alerts.webhooks]]: chat and webhook alerts."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from agent.config.types import Duration, Secret, StrictModel, parse_duration
from agent.core.vocabulary import SEVERITIES, AlertKind, ChannelType, Language, Severity, Style
from agent.core.zones import zone

if TYPE_CHECKING:
    from agent.alerts.services import Channel

EVENT_TYPES = tuple(AlertKind)

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\S+)\s*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def parse_rate(value: str) -> tuple[int, float]:
    """``"20/1m"`` -> (20, 60.0)."""
    m = _RATE.match(value) if isinstance(value, str) else None
    if not m:
        raise ValueError(f'expected a rate like "20/1m" or "5/1s", got {value!r}')
    count, period = int(m.group(1)), parse_duration(m.group(2))
    if count < 1 or period <= 0:
        raise ValueError(f"a rate needs at least 1 message per positive period, got {value!r}")
    return count, period


def _check_rate(value: str) -> str:
    parse_rate(value)
    return value


Rate = Annotated[str, AfterValidator(_check_rate)]


def _check_zone(value: str) -> str:
    zone(value)  # a ZoneError (a ValueError) says why and what to install
    return value


class WebhookChannel(StrictModel):
    """One ``[[alerts.webhooks]]`` table: where to send, how to sign, and what to send there."""

    name: str
    type: ChannelType
    url: Secret  # the URL carries the robot's token: treat it as a secret
    secret: Secret | None = None  # signing key (DingTalk "SEC...", Feishu signature key, webhook HMAC)
    language: Language | None = None  # default: [alerts] language
    events: list[AlertKind] = Field(default_factory=lambda: list(EVENT_TYPES))
    severities: list[Severity] = Field(default_factory=lambda: list(SEVERITIES))
    style: str | None = None  # one its service declares; default the first
    title_prefix: str = Field("", max_length=40)  # e.g. a DingTalk/Feishu security keyword
    link: str | None = None  # a dashboard URL; {hostname}, {instance_id}, {region} are filled in
    rate_limits: list[Rate] | None = None  # default: the rates its service declares
    timeout: Duration = Field("10s", gt=0, le=120)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("use letters, digits, '.', '_' or '-' (it becomes a metric label)")
        return v

    @field_validator("url")
    @classmethod
    def _inline_url(cls, v: Secret) -> Secret:
        if v.value is not None and not v.value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return v

    @model_validator(mode="after")
    def _style(self) -> WebhookChannel:
        allowed = declared(self.type).styles
        if self.style is not None and self.style not in allowed:
            raise ValueError(f"style for {self.type} must be one of {', '.join(allowed)}")
        if self.type == ChannelType.DINGTALK and self.style == Style.CARD and not self.link:
            raise ValueError("a DingTalk actionCard needs a button target: set link")
        return self

    @property
    def effective_style(self) -> str:
        return self.style or declared(self.type).styles[0]

    @property
    def rates(self) -> tuple[tuple[int, float], ...]:
        rates = self.rate_limits if self.rate_limits is not None else declared(self.type).rates
        return tuple(parse_rate(r) for r in rates)


class AlertsSection(StrictModel):
    language: Language = Language.EN
    timezone: Annotated[str, AfterValidator(_check_zone)] = "UTC"
    webhooks: list[WebhookChannel] = Field(default_factory=list)
    repeat_interval: Duration = Field("4h", gt=0)  # re-send a still-active condition this often
    send_resolved: bool = True
    verdict_hold: Duration = Field("0s", ge=0, le=86400)  # extra hold on top of the classifier's
    queue_size: int = Field(1000, ge=10, le=1_000_000)  # per channel, spooled on disk
    max_digest: int = Field(200, ge=2, le=10_000)  # alerts grouped into one digest at most
    backoff_initial: Duration = Field("2s", gt=0)
    backoff_max: Duration = Field("5m", gt=0)
    flush_timeout: Duration = Field("2s", ge=0, le=60)  # on shutdown; the rest stays spooled

    @field_validator("webhooks")
    @classmethod
    def _unique(cls, v: list[WebhookChannel]) -> list[WebhookChannel]:
        names = [c.name for c in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"channel names must be unique: {', '.join(dup)}")
        return v

    @model_validator(mode="after")
    def _backoff(self) -> AlertsSection:
        if self.backoff_max < self.backoff_initial:
            raise ValueError("backoff_max must be at least backoff_initial")
        return self


def declared(kind: str) -> type[Channel]:
    """The service's own declaration (agent/alerts/services/<service>.py): its styles and rates.
    Read when a channel is checked, so the config never keeps a copy; a ValueError names the types."""
    from agent.alerts.services import channel_class

    return channel_class(kind)


def channel_language(section: AlertsSection, channel: WebhookChannel) -> str:
    return channel.language or section.language


__all__ = [
    "EVENT_TYPES",
    "SEVERITIES",
    "AlertsSection",
    "WebhookChannel",
    "channel_language",
    "declared",
    "parse_rate",
]
