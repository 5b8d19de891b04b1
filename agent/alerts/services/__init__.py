"""The chat and webhook services, one module each: a :class:`~agent.alerts.services.base.Channel`
subclass that declares its type, styles, default rates and example URL. Every module here is found
by walking this package, so no list of them is written down anywhere; the vocabulary's
``ChannelType`` names them for the config, and a test holds the two alike."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from agent.alerts.services.base import DECLARED, Channel


@cache
def _discover() -> None:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def channel_types() -> dict[str, type[Channel]]:
    """Every declared service's class, by its type."""
    _discover()
    return dict(DECLARED)


def channel_class(kind: str) -> type[Channel]:
    """The class that serves ``kind``; a ValueError naming the declared types when none does."""
    _discover()
    try:
        return DECLARED[kind]
    except KeyError:
        raise ValueError(f"no channel serves type {kind!r}; the types are {', '.join(DECLARED)}") from None


__all__ = ["Channel", "channel_class", "channel_types"]
