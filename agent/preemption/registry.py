"""The one list of clouds: each ``agent/preemption/clouds/<cloud>.py`` declares itself here once, with
:func:`declare`, and everything that needs to know the clouds reads the declarations.

A declaration is the cloud's provider class (its name, base URL, notice kinds), the DMI strings that
say a node runs on it (``provider = "auto"``; never the network), its words in the alerts, the notice
it gives before it takes a spot instance back (the drill report), and where its metadata simulator
face lives. The readers: the watcher (the provider by name), ``detect.py``, ``[preemption] provider``
and ``[preemption.endpoints]``, the drill report, the alerts' words and the simulator. The modules
are found by walking ``agent.preemption.clouds``, so no list of them is written down anywhere; the
vocabulary's ``Cloud`` names them for the rest of the code, and a test holds the two alike.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.preemption.dmi import DmiRule
    from agent.preemption.provider import Provider


@dataclass(frozen=True, slots=True)
class NoticeWindow:
    """How long the cloud warns before it takes a spot/preemptible instance back."""

    label: str  # the drill report's words: "AWS spot (2 min)"
    seconds: float


@dataclass(frozen=True, slots=True)
class CloudSpec:
    """One cloud, declared once.

    ``dmi``: any one rule that matches says the node runs here. ``words``: its name in the alerts,
    English then Chinese. ``simulator``: ``"module:Class"`` of its face in the metadata simulator
    (a ``agent.devtools.simclouds.CloudSim``), imported by the simulator only, never by the daemon.
    ``order``: its place in detection, the config and the drill report (built-ins 10, 20, ...)."""

    provider: type[Provider]
    dmi: tuple[DmiRule, ...]
    words: tuple[str, str]
    notice: NoticeWindow
    simulator: str
    order: int = 100

    def __post_init__(self) -> None:
        if not self.dmi:
            raise ValueError(f"cloud {self.provider.name}: no DMI rule, so auto never picks it")
        module, _, cls = self.simulator.partition(":")
        if not module or not cls:
            raise ValueError(f"cloud {self.provider.name}: simulator must be 'module:Class'")

    @property
    def name(self) -> str:
        return self.provider.name


_CLOUDS: dict[str, CloudSpec] = {}


def declare(spec: CloudSpec) -> CloudSpec:
    """Add a cloud (declaring the same name again replaces it, so a reloaded module does not fail)."""
    _CLOUDS[spec.name] = spec
    return spec


def forget(name: str) -> None:
    _CLOUDS.pop(name, None)


@cache
def _discover() -> None:
    """Import every ``agent.preemption.clouds.<cloud>`` module: each declares its cloud."""
    package = importlib.import_module("agent.preemption.clouds")
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"agent.preemption.clouds.{info.name}")


def clouds() -> list[CloudSpec]:
    _discover()
    return sorted(_CLOUDS.values(), key=lambda c: (c.order, c.name))


def names() -> tuple[str, ...]:
    """The declared clouds' names, in their order (the vocabulary's ``Cloud`` members for the
    built-in ones, so config values and events keep comparing and printing as before)."""
    return tuple(c.name for c in clouds())


def find(name: str) -> CloudSpec | None:
    _discover()
    return _CLOUDS.get(name)


def provider_class(name: str) -> type[Provider] | None:
    spec = find(name)
    return spec.provider if spec is not None else None
