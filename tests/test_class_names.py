"""One class per name across ``agent/`` and ``client/`` (issue 35): a second ``Verdict`` or ``Step``
makes a reader (and a grep) guess which one a line means, so each class's name says what it is."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from conftest import REPO

ROOTS = (REPO / "agent", REPO / "client")


def classes(roots: tuple[Path, ...]) -> dict[str, list[str]]:
    """Each class name -> where it is defined (``path:line``), nested classes included."""
    where: dict[str, list[str]] = defaultdict(list)
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "build" in path.relative_to(root).parts:  # the client's wheel build copies its sources
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return where


def test_no_two_classes_share_a_name() -> None:
    found = classes(ROOTS)
    assert found, "no classes found: the roots moved?"
    twice = {name: files for name, files in sorted(found.items()) if len(files) > 1}
    assert not twice, "classes sharing a name (rename all but the central one): " + "; ".join(
        f"{name} in {', '.join(files)}" for name, files in twice.items()
    )


def test_the_check_names_a_duplicate(tmp_path: Path) -> None:
    for part in ("a", "b"):
        (tmp_path / part).mkdir()
        (tmp_path / part / "m.py").write_text("class Verdict:\n    pass\n\n\nclass Own:\n    pass\n")
    (tmp_path / "b" / "m.py").write_text("class Verdict:\n    pass\n")
    found = classes((tmp_path / "a", tmp_path / "b"))
    assert len(found["Verdict"]) == 2 and len(found["Own"]) == 1
