"""Where two classifiers part, in verdicts: ``classifier_digest.py`` run on both trees over the same
streams, and each evaluation's vote and verdict in force compared by label.

    git archive <commit> agent | tar -x -C /tmp/old
    .venv/bin/python bench/classifier_moves.py /tmp/old [NEW_TREE]

Prints the evaluations counted and each move ``old -> new: n`` (votes and verdicts in force apart),
most frequent first. The digest itself changes with any field the records gain; the labels do not.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
# a Judgement's repr (read as "Verdict(" by the digest): its verdict and sub-reason words
LABEL = re.compile(r"Verdict\(verdict=<Verdict\.\w+: '([\w-]+)'>, sub_reason=(?:None|<\w+\.\w+: '([\w-]+)'>)")


def labels(tree: str, out: Path) -> list[tuple[str, str]]:
    subprocess.run([sys.executable, str(HERE / "classifier_digest.py"), tree, str(out)], check=True)
    pairs = []
    for line in out.read_text().splitlines():
        found = [f"{v}/{s}" if s else v for v, s in LABEL.findall(line)]
        if line.startswith("(") and found:
            vote, current = found[0], (found[1] if len(found) > 1 else "none")
            pairs.append((vote, current))
    return pairs


def main() -> int:
    old_tree = sys.argv[1]
    new_tree = sys.argv[2] if len(sys.argv) > 2 else str(HERE.parent)
    with tempfile.TemporaryDirectory() as d:
        old, new = labels(old_tree, Path(d) / "old"), labels(new_tree, Path(d) / "new")
    if len(old) != len(new):
        print(f"the trees made {len(old)} and {len(new)} evaluations: not comparable")
        return 1
    votes = Counter((a[0], b[0]) for a, b in zip(old, new, strict=True) if a[0] != b[0])
    held = Counter((a[1], b[1]) for a, b in zip(old, new, strict=True) if a[1] != b[1])
    print(
        f"{len(old)} evaluations; votes moved {sum(votes.values())},"
        f" verdicts in force moved {sum(held.values())}"
    )
    for name, moves in (("votes", votes), ("in force", held)):
        for (a, b), n in moves.most_common():
            print(f"  {name}: {a} -> {b}: {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
