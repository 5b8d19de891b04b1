"""[trainer]: finding the training processes and asking them to checkpoint."""

from __future__ import annotations

import ipaddress
import re
import signal as _signal
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from agent.config.types import Duration, StrictModel
from agent.core.vocabulary import DiscoverKind, NoticeKind

DISCOVER_KINDS = tuple(DiscoverKind)


def check_discover(spec: str) -> str:
    """``nvml``, ``pidfile:PATH``, ``cmdline:REGEX``, ``cgroup:PATH`` or ``systemd-unit:NAME``."""
    kind, sep, arg = spec.partition(":")
    if kind not in DISCOVER_KINDS:
        raise ValueError(
            f"unknown discovery {spec!r}: use nvml, pidfile:PATH, cmdline:REGEX, cgroup:PATH "
            "or systemd-unit:NAME"
        )
    if kind == DiscoverKind.NVML:
        if sep:
            raise ValueError("nvml takes no argument")
        return spec
    if not arg.strip():
        raise ValueError(f"{kind}: needs an argument after the colon")
    if kind == DiscoverKind.PIDFILE and not arg.startswith("/"):
        raise ValueError(f"pidfile:{arg}: the path must be absolute")
    if kind == DiscoverKind.CMDLINE:
        try:
            re.compile(arg)
        except re.error as e:
            raise ValueError(f"cmdline:{arg}: invalid regex ({e})") from None
    return spec


def signal_number(name: str) -> int:
    """``"SIGUSR1"``, ``"USR1"`` or ``"SIGRTMIN+3"`` -> the signal number."""
    n = name.strip().upper()
    if not n.startswith("SIG"):
        n = "SIG" + n
    if n.startswith("SIGRTMIN+") and n[9:].isdigit():
        num = _signal.SIGRTMIN + int(n[9:])
        if num > _signal.SIGRTMAX:
            raise ValueError(f"{name}: beyond SIGRTMAX")
        return num
    try:
        return int(_signal.Signals[n])
    except KeyError:
        raise ValueError(f"unknown signal {name!r} (use a name like SIGUSR1 or SIGTERM)") from None


class TrainerSection(StrictModel):
    discover: list[str] = Field(
        default_factory=lambda: [DiscoverKind.NVML.value],
        description="how to find the training processes; several are combined",
    )
    signal: str = Field("SIGUSR1", description="the checkpoint signal")
    dry_run: bool = Field(False, description="log and report what would be done; touch no process")
    act_on: list[str] = Field(
        default_factory=lambda: [
            "spot-*",
            NoticeKind.PREEMPT,
            NoticeKind.MAINTENANCE_REBOOT,
            NoticeKind.MAINTENANCE_REDEPLOY,
            NoticeKind.MAINTENANCE_STOP,
            NoticeKind.MAINTENANCE_TERMINATE,
        ],
        description="notice kinds (shell patterns) that trigger a checkpoint",
    )
    checkpoint_budget: Duration = Field(
        "10m", ge=0, description="a far-off notice is acted on at deadline minus this"
    )
    escalate_before: Duration = Field(
        "0s", ge=0, description="send a final SIGTERM this long before the deadline; 0s = never"
    )
    no_deadline_window: Duration = Field(
        "30s", gt=0, description="how long to wait for the ack when the cloud gives no deadline"
    )
    request_file: str = Field(
        "", description="where the request JSON goes; empty = <runtime_dir>/checkpoint/request.json"
    )
    discovery_file: str = Field(
        "",
        description="where trainers find the agent; empty = the fixed place "
        "(/run/training-node-agent/agent.json as root, else /tmp/training-node-agent-<uid>/agent.json); "
        "none = publish nothing",
    )
    startup_grace: Duration = Field(
        "60s", ge=0, description="a younger target without a handler is still starting, not no-handler"
    )
    http_url: str = Field("", description="also POST the request to this loopback URL; empty = off")
    http_timeout: Duration = Field("2s", gt=0, le=30)
    discover_interval: Duration = Field("10s", ge=0.5, description="how often the target gauge is refreshed")
    step_report: Duration = Field(
        "5s", ge=0.5, le=300, description="how often tna_client hands over its step figures (guard.step())"
    )

    def request_path(self, runtime_dir: Path) -> Path:
        """The request file; its directory is the trainer's channel back (acks, periodic saves)."""
        return Path(self.request_file) if self.request_file else runtime_dir / "checkpoint" / "request.json"

    @field_validator("discover")
    @classmethod
    def _discover(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("give at least one discovery method (nvml is the default)")
        return [check_discover(s) for s in v]

    @field_validator("signal")
    @classmethod
    def _signal(cls, v: str) -> str:
        name = v.strip().upper()
        name = name if name.startswith("SIG") else "SIG" + name
        if signal_number(name) in (_signal.SIGKILL, _signal.SIGSTOP):
            raise ValueError(f"{name} cannot be handled by a process; it would kill the job")
        return name

    @field_validator("request_file")
    @classmethod
    def _request_file(cls, v: str) -> str:
        if v and not v.startswith("/"):
            raise ValueError("must be an absolute path")
        return v

    @field_validator("discovery_file")
    @classmethod
    def _discovery_file(cls, v: str) -> str:
        if v and v != "none" and not v.startswith("/"):
            raise ValueError('must be an absolute path, "" (the fixed place) or "none"')
        return v

    @field_validator("http_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v:
            return v
        parts = urlsplit(v)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"expected http://127.0.0.1:PORT/path, got {v!r}")
        host = parts.hostname
        if host != "localhost":
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise ValueError(f"the request goes only to a local trainer; {host} is not loopback")
        return v
