"""[agent] and [http]: the daemon's own settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agent.config.types import Duration, ListenAddress, StrictModel
from agent.core.vocabulary import LogFormat, TcpStatus


class AgentSection(StrictModel):
    interval: Duration = Field("1s", gt=0.05, le=3600, description="sampling period")
    collector_timeout: Duration = Field(
        "5s", gt=0, le=600, description="a collector call running longer is reported failed for that tick"
    )
    stall_after: Duration = Field(
        "30s", gt=0, le=3600, description="healthz turns 503 once sampling has made no progress this long"
    )
    collector_failing_after: Duration = Field(
        "2m", gt=0, description="a collector failing this long raises an alert (and another on recovery)"
    )
    state_dir: str = "/var/lib/training-node-agent"
    runtime_dir: str = "/run/training-node-agent"
    procfs: str = "/proc"
    sysfs: str = "/sys"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: LogFormat = LogFormat.AUTO


class HttpSection(StrictModel):
    listen: ListenAddress = "0.0.0.0:9477"
    control_socket: str = "/run/training-node-agent/control.sock"
    web_config: str = Field("", description="exporter-toolkit web-config file: TLS, basic auth, headers")
    tcp_status: TcpStatus = Field(
        TcpStatus.REDACTED, description="/api/v1/status on the TCP port: the network view, or not served"
    )
    max_connections: int = Field(64, ge=4, le=10000, description="open connections on the port")
    header_timeout: Duration = Field(
        "10s", gt=0, le=300, description="TLS handshake and request head must arrive within this"
    )
    idle_timeout: Duration = Field("90s", gt=0, le=3600, description="a kept-alive idle connection is closed")
    max_header_bytes: int = Field(16384, ge=1024, le=1048576, description="request line plus headers")
    tls_handshake_rate: float = Field(
        100.0,
        gt=0,
        le=100000,
        description="TLS handshakes started a second; later ones wait their turn",
    )
    tls_handshake_burst: int = Field(16, ge=1, le=10000, description="TLS handshakes started at once")
