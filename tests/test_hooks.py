"""A part's hooks (status, metrics, control routes, pids, verdict line) are protocols its class
names (agent/core/component.py): the daemon finds them by type, so a misspelt one is an error, not a
status section or a route that silently goes missing."""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from agent.core import component
from agent.core.component import HOOKS, HasMetrics, HasStatus

AGENT = REPO / "agent"
# each hook protocol's one method
HOOK_METHOD = {h.__name__: next(n for n in vars(h) if not n.startswith("_")) for h in HOOKS}


def _parts() -> dict[str, ast.ClassDef]:
    """Every class in agent/ that the supervisor runs: a ``name`` and ``async def run`` and ``stop``."""
    found = {}
    for path in sorted(AGENT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            coros = {f.name for f in node.body if isinstance(f, ast.AsyncFunctionDef)}
            named = any(
                isinstance(s, ast.Assign | ast.AnnAssign)
                and "name"
                in {
                    t.id
                    for t in (s.targets if isinstance(s, ast.Assign) else [s.target])
                    if isinstance(t, ast.Name)
                }
                for s in node.body
            )
            if {"run", "stop"} <= coros and named:
                found[f"{path.relative_to(AGENT)}:{node.name}"] = node
    return found


PARTS = _parts()


def test_the_parts_are_found():
    names = {key.rpartition(":")[2] for key in PARTS}
    assert {"CheckpointComponent", "ClassifierComponent", "PreemptionWatcher", "Alerter"} <= names
    assert len(PARTS) >= 7


def _methods(cls: ast.ClassDef) -> set[str]:
    return {f.name for f in cls.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}


@pytest.mark.parametrize("key", sorted(PARTS))
def test_a_part_declares_each_hook_it_offers(key: str):
    cls = PARTS[key]
    bases = {b.id for b in cls.bases if isinstance(b, ast.Name)}
    offered = {proto for proto, method in HOOK_METHOD.items() if method in _methods(cls)}
    assert offered - bases == set(), f"{key} offers these hooks without naming their protocols"
    assert bases & set(HOOK_METHOD) <= offered  # (an undefined one is mypy's and Python's: below)


@pytest.mark.parametrize("key", sorted(PARTS))
def test_no_part_has_a_near_miss_of_a_hook(key: str):
    hooks = set(HOOK_METHOD.values())
    misses = {
        m: difflib.get_close_matches(m, hooks, n=1, cutoff=0.75)
        for m in _methods(PARTS[key]) - hooks
        if difflib.get_close_matches(m, hooks, n=1, cutoff=0.75)
    }
    assert misses == {}, f"{key}: a misspelt hook?"


class _Misspelt(HasStatus, HasMetrics):
    name = "misspelt"

    def stauts(self) -> dict[str, Any]:
        return {}

    def metrics(self) -> Iterable[Any]:
        return []


class _Right(HasStatus):
    name = "right"

    def status(self) -> dict[str, Any]:
        return {"ok": True}


def test_a_misspelt_hook_cannot_be_built():
    with pytest.raises(TypeError, match="abstract method status"):
        _Misspelt()  # type: ignore[abstract]
    right = _Right()
    assert isinstance(right, HasStatus) and not isinstance(right, HasMetrics)
    assert right.status() == {"ok": True}


def test_the_hooks_are_the_daemon_s():
    """Each protocol is read by the daemon (or its metrics), and nothing finds a hook by string."""
    runtime = "".join(p.read_text() for p in (AGENT / "runtime").glob("*.py"))
    for proto in HOOK_METHOD:
        assert f"isinstance(c, {proto})" in runtime or f"isinstance(comp, {proto})" in runtime, proto
    assert not hasattr(component, "optional")
    for path in AGENT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
                args = node.args[1:2]
                assert not (
                    args and isinstance(args[0], ast.Constant) and args[0].value in HOOK_METHOD.values()
                ), f"{Path(path).relative_to(REPO)} looks a hook up by name"
