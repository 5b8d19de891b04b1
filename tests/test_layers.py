"""Every import of agent/ against agent/layers.py: none runs up a layer but the few written there with
their reasons, and no circle of imports spans more than three files (TYPE_CHECKING imports and imports
inside functions count: they are the same dependency, later)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

from agent.layers import AGAINST_THE_ORDER, LAYERS, layer_of

AGENT = REPO / "agent"
MAX_AGAINST = 4
MAX_CIRCLE = 3


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, known: set[str]) -> set[str]:
    """The agent modules ``path`` imports (``from agent.x import y`` is agent.x.y where that is a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "agent"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "agent":
                continue
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            out |= subs or {node.module}
    return out


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in AGENT.rglob("*.py")}
    known = set(files)
    return {m: {i for i in imports(p, known) if i in known and i != m} for m, p in files.items()}


def against_the_order(g: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(m, i) for m, deps in g.items() for i in deps if layer_of(i) > layer_of(m)}


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_every_room_has_a_layer() -> None:
    rooms = {layer_of(m) for m in graph()}  # a KeyError names the room the table lacks
    assert len(rooms) == len(LAYERS), "a layer no module is in: the table is out of date"


def test_no_import_runs_up_but_the_written_ones() -> None:
    found = against_the_order(graph())
    unexplained = sorted(found - set(AGAINST_THE_ORDER))
    assert not unexplained, (
        "imports against agent/layers.py's order (move the code, or write why):\n"
        + "\n".join(f"  {m} -> {i} (layer {layer_of(m)} -> {layer_of(i)})" for m, i in unexplained)
    )
    stale = sorted(set(AGAINST_THE_ORDER) - found)
    assert not stale, f"written as against the order but no longer imported so: {stale}"
    assert len(AGAINST_THE_ORDER) <= MAX_AGAINST
    assert all(len(why) > 40 for why in AGAINST_THE_ORDER.values())


def test_no_circle_of_imports_spans_more_than_three_files() -> None:
    big = [c for c in circles(graph()) if len(c) > MAX_CIRCLE]
    assert not big, "import circles over three files: " + "; ".join(" -> ".join(c) for c in big)


def test_the_checks_see_what_they_look_for() -> None:
    g = {"agent.core.a": {"agent.runtime.b"}, "agent.runtime.b": {"agent.core.a"}, "agent.core.c": set()}
    assert against_the_order(g) == {("agent.core.a", "agent.runtime.b")}
    assert circles(g) == [["agent.core.a", "agent.runtime.b"]]
    chain = {f"agent.core.m{i}": {f"agent.core.m{(i + 1) % 4}"} for i in range(4)}
    assert [len(c) for c in circles(chain)] == [4]
    assert imports(Path(__file__), set()) >= {"agent.layers"}
