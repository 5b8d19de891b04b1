"""One typed config tree, loaded from one TOML file.

Every section lives in its own module; this one composes them, loads the file and turns pydantic's
errors into one readable line per problem, each naming the file and the key path.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from agent.config.advice import AdviceSection
from agent.config.alerts import AlertsSection
from agent.config.classifier import ClassifierSection
from agent.config.core import AgentSection, HttpSection
from agent.config.cost import CostSection
from agent.config.fleet import FleetSection
from agent.config.goodput import GoodputSection
from agent.config.gpu import GpuSection
from agent.config.jobs import JobsSection
from agent.config.network import NetworkSection
from agent.config.preemption import PreemptionSection
from agent.config.scheduler import SchedulerSection
from agent.config.storage import StorageSection
from agent.config.trainer import TrainerSection
from agent.config.types import Secret, StrictModel

DEFAULT_PATH = "/etc/training-node-agent/agent.toml"


class Config(StrictModel):
    agent: AgentSection = Field(default_factory=AgentSection)
    http: HttpSection = Field(default_factory=HttpSection)
    gpu: GpuSection = Field(default_factory=GpuSection)
    storage: StorageSection = Field(default_factory=StorageSection)
    network: NetworkSection = Field(default_factory=NetworkSection)
    classifier: ClassifierSection = Field(default_factory=ClassifierSection)
    preemption: PreemptionSection = Field(default_factory=PreemptionSection)
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    alerts: AlertsSection = Field(default_factory=AlertsSection)
    goodput: GoodputSection = Field(default_factory=GoodputSection)
    cost: CostSection = Field(default_factory=CostSection)
    advice: AdviceSection = Field(default_factory=AdviceSection)
    jobs: JobsSection = Field(default_factory=JobsSection)
    scheduler: SchedulerSection = Field(default_factory=SchedulerSection)
    fleet: FleetSection = Field(default_factory=FleetSection)

    @model_validator(mode="after")
    def _one_node_name(self) -> Config:
        old, new = self.jobs.node_name, self.scheduler.node_name
        if old and new and old != new:
            raise ValueError(
                f"[jobs] node_name {old!r} and [scheduler] node_name {new!r} differ: set [scheduler]"
                " node_name only (the jobs source reads it too)"
            )
        return self

    @property
    def node_name(self) -> str:
        """This node's name in the scheduler: ``[scheduler] node_name``, else the deprecated
        ``[jobs] node_name``; "" lets the scheduler say (``slurmd -C``)."""
        return self.scheduler.node_name or self.jobs.node_name


class ConfigError(Exception):
    """All problems with one config file. ``problems`` holds one line each."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: " + "; ".join(problems))

    def render(self) -> str:
        n = len(self.problems)
        lines = [f"{self.path}: {n} problem{'s' if n != 1 else ''}:"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


def _key_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        elif isinstance(item, str) and item.startswith(("function-", "tagged-union[")):
            continue  # pydantic's validator wrappers, not keys
        else:
            parts.append(str(item))
    return ".".join(parts) or "(top level)"


def _describe(err: dict[str, Any]) -> str:
    key = _key_path(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{key}: unknown key"
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    shown = err.get("input")
    if (
        kind not in ("missing", "value_error")
        and not isinstance(shown, dict | list)
        and "secret" not in key.lower()
    ):
        return f"{key}: {msg} (got {shown!r})"
    return f"{key}: {msg}"


def parse_config(data: dict[str, Any], path: str = "<config>") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        # pydantic reports every error at once; keep their order, drop exact repeats
        problems = list(dict.fromkeys(_describe(err) for err in e.errors()))  # type: ignore[arg-type]
        raise ConfigError(path, problems) from None


def load_config(path: str | Path | None) -> Config:
    """Load and validate; a missing, unreadable or invalid file raises :class:`ConfigError`."""
    if path is None:
        return Config()
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(str(p), ["file not found"]) from None
    except OSError as e:
        raise ConfigError(str(p), [f"cannot read: {e.strerror}"]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(str(p), [f"not UTF-8 text ({e.reason} at byte {e.start})"]) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(p), [f"invalid TOML: {e}"]) from None
    return parse_config(data, str(p))


def redacted_dump(cfg: Config) -> dict[str, Any]:
    """The resolved config as plain data, every secret shown as its source only."""

    def walk(value: Any) -> Any:
        if isinstance(value, Secret):
            return repr(value)
        if isinstance(value, StrictModel):
            return {name: walk(getattr(value, name)) for name in type(value).model_fields}
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        return value

    dumped = walk(cfg)
    # durations back to their human form
    return _with_durations(cfg, dumped)


def _with_durations(model: StrictModel, dumped: dict[str, Any]) -> dict[str, Any]:
    plain = model.model_dump(mode="json")

    def merge(a: Any, b: Any) -> Any:
        if isinstance(a, dict) and isinstance(b, dict):
            return {k: merge(a[k], b.get(k)) for k in a}
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            return [merge(x, y) for x, y in zip(a, b, strict=True)]
        if isinstance(a, str) and a.startswith("Secret("):
            return a
        return b if isinstance(b, str) and isinstance(a, float) else a

    return merge(dumped, plain)


__all__ = ["DEFAULT_PATH", "Config", "ConfigError", "Secret", "load_config", "parse_config", "redacted_dump"]
