"""The shape the code keeps (docs/architecture.md): rooms of a readable size, each vocabulary word
written once, the exporter imported only by the faces that serve it, and a service that imports
none of the tools around it."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from enum import StrEnum
from pathlib import Path

import pytest
from conftest import REPO, AgentProcess, wait_until

from agent.core import tlswords, vocabulary

AGENT = REPO / "agent"
MAX_LINES = 400
MODULES = sorted(AGENT.rglob("*.py"))

# words no module outside the vocabulary has another use for: a literal equal to one of their
# values is the word written by hand (a cloud's own spelling, like AWS's "spot", is kept out)
SPELLED_ONCE = (
    vocabulary.NoticeKind,
    vocabulary.ChannelType,
    vocabulary.Language,
    vocabulary.Cadence,
    tlswords.TlsVersion,
    tlswords.ClientAuthType,
)


def _literals(path: Path, own_words: bool = True) -> set[str]:
    """The module's string constants, docstrings left out, and (``own_words``) the members of a
    part's own word lists (a StrEnum outside the vocabulary, as the simulator's ``SimFault.SLOW``:
    the same spelling as ``Cadence.SLOW``, another word)."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    docs |= (
        set()
        if not own_words
        else {
            id(stmt.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) == "StrEnum" for b in node.bases)
            for stmt in node.body
            if isinstance(stmt, ast.Assign)
        }
    )
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    }


def test_the_tree_is_read():
    assert len(MODULES) > 150 and AGENT / "core" / "vocabulary.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_is_over_the_limit(path: Path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{lines} lines: split it along a seam (docs/architecture.md)"


@pytest.mark.parametrize("enum", SPELLED_ONCE, ids=lambda e: e.__name__)
def test_words_are_written_once(enum: type[StrEnum]):
    words = {m.value for m in enum}
    found = {
        str(path.relative_to(REPO)): sorted(words & _literals(path))
        for path in MODULES
        if path.name not in ("vocabulary.py", "tlswords.py")
    }
    assert {p: w for p, w in found.items() if w} == {}, f"write {enum.__name__} members"
    home = Path(sys.modules[enum.__module__].__file__ or "")
    assert words & _literals(home, own_words=False) == words


def test_only_runtime_and_cli_import_the_exporter():
    importers = set()
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n == "agent.exporter" or n.startswith("agent.exporter.") for n in names):
                importers.add(path.relative_to(AGENT).parts[0])
    assert importers - {"runtime", "cli", "exporter"} == set()
    assert {"runtime", "exporter"} <= importers  # the check sees the imports that are there


def test_the_daemon_s_parts_wait_without_asyncio_wait_for():
    """On 3.11 ``wait_for`` swallows a cancel that meets its result; a loop a reload cancelled then
    runs on for good (agent/core/aio.py). The parts wait with ``asyncio.timeout`` instead."""
    users = set()
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "wait_for"
                and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"
            ):
                users.add(path.relative_to(AGENT))
    # short-lived commands and the fakes may; the check sees the uses that are there
    assert {p for p in users if p.parts[0] not in ("cli", "devtools")} == set()
    assert Path("cli", "top.py") in users


# the daemon as `training-node-agent run` starts it, its module imported first as a script would;
# once it serves, a thread writes the modules it has loaded
RUN_AND_LIST = """
import json, sys, threading, time
from pathlib import Path
out, trigger = Path(sys.argv[1]), Path(sys.argv[2])
def write():
    while not trigger.exists():
        time.sleep(0.05)
    Path(f"{out}.part").write_text(json.dumps(sorted(sys.modules)))
    Path(f"{out}.part").rename(out)
threading.Thread(target=write, daemon=True).start()
import agent.runtime.daemon
from agent.cli.main import main
sys.exit(main(sys.argv[3:]))
"""


def test_the_service_imports_no_tooling(tmp_path: Path):
    """``run`` loads neither a sub-command's module (the simulator, the demo, ``report``, ``top``)
    nor rich, which structlog would take for its tracebacks where the ``[top]`` extra installed it
    (docs/architecture.md, "The daemon's memory")."""
    assert importlib.util.find_spec("rich") is not None, "the test venv has the [top] extra: rich"
    agent = AgentProcess(tmp_path, {})
    out, trigger = tmp_path / "modules.json", tmp_path / "trigger"
    run = ["run", "--config", str(agent.config_path)]
    with open(agent.log_path, "ab") as log:
        agent.proc = subprocess.Popen(
            [sys.executable, "-c", RUN_AND_LIST, str(out), str(trigger), *run],
            cwd=REPO,
            env=agent.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        agent.wait_ready()
        trigger.touch()
        wait_until(out.exists, 10, what="the module list")
        modules = json.loads(out.read_text())
    finally:
        agent.stop()
    assert "agent.runtime.daemon" in modules and "agent.sources.processes.collector" in modules
    tooling = [m for m in modules if m.startswith(("agent.devtools", "agent.cli.")) and m != "agent.cli.main"]
    assert tooling == [], tooling
    assert [m for m in modules if m.partition(".")[0] in ("rich", "pygments")] == []


def test_each_plugin_module_registers_the_commands_named_for_it():
    """``PLUGINS`` is how a command finds its module: a command left out there could not be run."""
    from agent.cli import main

    for module in main.PLUGINS.values():
        importlib.import_module(module)
    registered = {name: run.__module__ for name, (_, _, run) in main.COMMANDS.items()}
    plugins = {name: module for name, module in registered.items() if module != main.__name__}
    assert plugins == main.PLUGINS


def _agent_imports(path: Path) -> set[str]:
    """The ``agent.…`` modules a module imports, anywhere in it (a function's lazy import counts)."""
    package = ["agent", *path.relative_to(AGENT).parent.parts]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module or "").split(".")]).strip(".")
            out.add(module)
    return {m for m in out if m == "agent" or m.startswith("agent.")}


def test_core_imports_nothing_above_it():
    """core/ is the ground floor: the events, the vocabulary, the hooks' protocols, file helpers."""
    above = {
        str(path.relative_to(REPO)): sorted(m for m in _agent_imports(path) if not m.startswith("agent.core"))
        for path in sorted((AGENT / "core").rglob("*.py"))
    }
    assert {p: m for p, m in above.items() if m} == {}
    assert "agent.core.vocabulary" in _agent_imports(AGENT / "core" / "events.py")  # imports are seen


def _doubles(node: ast.AST) -> bool:
    """``2 ** n``, ``x * 2`` or ``2 * x``: a doubling (``2**30``, a unit, is none)."""
    if not isinstance(node, ast.BinOp):
        return False
    two = [s for s in (node.left, node.right) if isinstance(s, ast.Constant) and s.value in (2, 2.0)]
    if isinstance(node.op, ast.Pow):
        base_two = isinstance(node.left, ast.Constant) and node.left.value in (2, 2.0)
        return base_two and not isinstance(node.right, ast.Constant)
    return isinstance(node.op, ast.Mult) and bool(two)


def _backoff_formulas(path: Path) -> list[int]:
    """Lines that grow a wait by hand: a doubling inside ``min(...)``, ``x *= 2``, a ``2 ** n``, or a
    doubling assigned to a name that says backoff, delay, retry or wait."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and _doubles(node):
            found.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "min":
            found += [a.lineno for a in node.args if _doubles(a)]
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult | ast.Pow):
            if isinstance(node.value, ast.Constant) and node.value.value in (2, 2.0):
                found.append(node.lineno)
        elif isinstance(node, ast.Assign) and _doubles(node.value):
            names = [ast.unparse(t).lower() for t in node.targets]
            if any(w in n for n in names for w in ("backoff", "delay", "retry", "wait")):
                found.append(node.lineno)
    return sorted(set(found))


def test_backoff_is_written_once():
    """Every retry waits by agent/core/backoff.py; a second formula is a second rule."""
    helper = AGENT / "core" / "backoff.py"
    found = {
        str(p.relative_to(REPO)): lines for p in MODULES if p != helper and (lines := _backoff_formulas(p))
    }
    assert found == {}, "wait with agent.core.backoff"
    assert _backoff_formulas(helper)  # the check sees the one formula there is


def test_the_ledger_reads_only_what_the_classifier_publishes():
    """The goodput ledger books by the classifier's results (agent/classifier/published.py), never
    its engine, baselines or features, which the classifier may reshape at will."""
    reads = {
        str(p.relative_to(REPO)): sorted(m for m in _agent_imports(p) if m.startswith("agent.classifier"))
        for p in sorted((AGENT / "ledger").rglob("*.py"))
    }
    assert {p: m for p, m in reads.items() if set(m) - {"agent.classifier.published"}} == {}
    assert any(reads.values())  # the check sees the imports that are there
