"""[preemption]: which cloud's metadata service to watch, and how."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, PlainValidator, field_validator

from agent.config.types import Duration, StrictModel, choice_from
from agent.core.vocabulary import Setting
from agent.preemption import registry


def provider_choices() -> tuple[str, ...]:
    """A declared cloud's name, auto or none; never drill, which is the agent's own notices."""
    return (Setting.AUTO, *registry.names(), Setting.NONE)


Provider = Annotated[str, choice_from(provider_choices)]


def check_base_url(value: str) -> str:
    """Empty (the cloud's own address) or an ``http://host[:port][/prefix]`` base URL."""
    if not value:
        return value
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f'expected a base URL like "http://127.0.0.1:8200", got {value!r}')
    if parts.query or parts.fragment:
        raise ValueError(f"a base URL takes no query or fragment, got {value!r}")
    return value.rstrip("/")


def check_endpoints(value: object) -> dict[str, str]:
    """Per-cloud base URL overrides (used when that cloud is selected or auto-detected): a table with
    a key for each declared cloud, '' (its own address) unless set; a key no cloud declares is
    refused, naming the clouds."""
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a table of cloud = base URL, got {value!r}")
    clouds = registry.names()
    for key in value:
        if key not in clouds:
            raise ValueError(f"no cloud is named {key!r}; the clouds are {', '.join(clouds)}")
    table = {}
    for cloud in clouds:
        url = value.get(cloud, "")
        if not isinstance(url, str):
            raise ValueError(f"{cloud}: expected a base URL string, got {url!r}")
        try:
            table[str(cloud)] = check_base_url(url)
        except ValueError as e:
            raise ValueError(f"{cloud}: {e}") from None
    return table


Endpoints = Annotated[dict[str, str], PlainValidator(check_endpoints)]


class PreemptionSection(StrictModel):
    provider: Provider = Setting.AUTO
    endpoint: str = Field("", description="base URL override, e.g. a local simulator; empty = the cloud's")
    endpoints: Endpoints = Field(default_factory=dict)
    poll_interval: Duration = Field("1s", ge=0.1, le=300)
    jitter: float = Field(0.05, ge=0, le=0.5, description="poll period spread, as a ratio of poll_interval")
    maintenance_interval: Duration = Field(
        "10s", ge=0.1, le=3600, description="period for maintenance lists announced hours ahead"
    )
    timeout: Duration = Field("2s", gt=0, le=60)
    max_requests_per_second: float = Field(5.0, ge=0.2, le=100)
    # a spot notice leaves two minutes (GCE: 30 s): a failing source never waits longer than this
    # values up to 1h stay valid (configs written when the default was 30s), but the watcher never
    # waits more than MAX_BACKOFF_SECONDS (agent/preemption/watcher.py) and says so
    backoff_max: Duration = Field("2s", ge=0.1, le=3600)
    token_ttl: Duration = Field("1h", ge=1, le=21600, description="hardened-mode / IMDSv2 token lifetime")
    allow_tokenless_fallback: bool = False
    withdraw_after_polls: int = Field(3, ge=1, le=100)
    max_deadline_ahead: Duration = Field("90d", gt=0)
    gcp_long_poll: bool = True
    gcp_long_poll_timeout: Duration = Field("60s", ge=1, le=3600)
    azure_ack: bool = False
    azure_api_version: str = Field("2020-07-01", pattern=r"^\d{4}-\d{2}-\d{2}$")
    max_body_bytes: int = Field(1_048_576, ge=1024, le=64 * 1_048_576)

    @field_validator("endpoint")
    @classmethod
    def _base_url(cls, v: str) -> str:
        return check_base_url(v)

    def endpoint_for(self, cloud: str) -> str:
        """The configured override for ``cloud`` ('' = the cloud's real address)."""
        return self.endpoint or self.endpoints.get(cloud, "")
