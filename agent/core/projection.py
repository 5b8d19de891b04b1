"""Cutting a JSON-like value down to an allowlist (the status JSON that the TCP port may show).

A spec is ``True`` (keep the value whole), a dict (keep those keys, each by its own spec) or
:class:`Each` (the spec applies to every value of a mapping or item of a list). Unlisted keys are
dropped, so a field that a new part adds stays off the network until someone lists it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias


@dataclass(frozen=True)
class Each:
    """The spec applies to every value of a mapping (its keys are kept) or item of a list."""

    spec: Spec


Spec: TypeAlias = "bool | dict[str, Spec] | Each"
KEEP = True


def fields(*names: str) -> dict[str, Spec]:
    return dict.fromkeys(names, KEEP)


def project(value: Any, spec: Spec) -> Any:
    """``value`` cut down to what ``spec`` lists; unlisted keys are dropped."""
    if spec is True:
        return value
    if isinstance(spec, Each):
        if isinstance(value, dict):
            return {k: project(v, spec.spec) for k, v in value.items()}
        if isinstance(value, list):
            return [project(v, spec.spec) for v in value]
        return None
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return None
        return {k: project(value[k], sub) for k, sub in spec.items() if k in value}
    return None


def spec_paths(spec: Spec, prefix: str = "") -> list[str]:
    """Every field the spec shows, as ``snapshot.gpus[].model`` (``[]``: each item or value)."""
    if spec is True:
        return [prefix]
    if isinstance(spec, Each):
        return spec_paths(spec.spec, prefix + "[]")
    if not isinstance(spec, dict):
        return []
    out: list[str] = []
    for k, sub in spec.items():
        out += spec_paths(sub, f"{prefix}.{k}" if prefix else k)
    return out
