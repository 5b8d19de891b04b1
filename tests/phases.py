"""``make test``: the whole suite in two phases, then one total.

1. Every test file that does not time itself runs side by side (pytest-xdist, ``--dist loadfile``:
   a file's tests stay on one worker, so its module fixtures, a booted container or an installed
   root, are made once). The files marked ``slow`` are handed out first (conftest.py), so that no
   worker ends the phase alone on one long file. Most of these tests wait on subprocesses, sockets
   and ticks, so a worker more than the cores keeps both busy.
2. The scenario lab (``lab``) and the tests that compare their own timings (``serial``: p99s
   against a quiet p99) run alone afterwards, one at a time, as they always have.

Both phases always run, so one failing shows the other's failures too. The last line is the total,
``total: N passed, N failed, N skipped``; the exit status is non-zero if either phase failed.
Arguments are passed to both phases (``make test PYTEST_ARGS='-k lab -x'``); a phase that selects
nothing is no failure.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

NO_TESTS = 5  # pytest's exit status when a selection is empty
SERIAL = "lab or serial"


def workers() -> str:
    return os.environ.get("TNA_TEST_WORKERS", str((os.cpu_count() or 1) + 1))


def phase(name: str, args: list[str], junit: Path) -> int:
    cmd = [sys.executable, "-m", "pytest", "-q", "-ra", f"--junitxml={junit}", *args]
    print(f"\n== make test, {name}: {' '.join(cmd[1:])}", flush=True)
    return subprocess.call(cmd)


def tally(junit: Path) -> tuple[dict[str, int], list[tuple[float, str]]]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    times: list[tuple[float, str]] = []
    if not junit.exists():
        return counts, times
    for case in ET.parse(junit).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            counts["failed"] += 1
        elif "skipped" in tags:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
        times.append((float(case.get("time") or 0), f"{case.get('classname')}::{case.get('name')}"))
    return counts, times


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="tna-phases-") as tmp:
        side, alone = Path(tmp) / "side-by-side.xml", Path(tmp) / "alone.xml"
        rc_side = phase(
            f"side by side ({workers()} workers)",
            ["-n", workers(), "--dist", "loadfile", "--no-loadscope-reorder", "-m", f"not ({SERIAL})", *argv],
            side,
        )
        rc_alone = phase("alone (the lab, and tests that time themselves)", ["-m", SERIAL, *argv], alone)
        total = {"passed": 0, "failed": 0, "skipped": 0}
        times: list[tuple[float, str]] = []
        for junit in (side, alone):
            counts, t = tally(junit)
            total = {k: total[k] + counts[k] for k in total}
            times += t
    # every test's time, for sizing the suite against its budget (build/ is not tracked)
    durations = Path(__file__).resolve().parent.parent / "build" / "test-durations.txt"
    with contextlib.suppress(OSError):
        durations.parent.mkdir(exist_ok=True)
        durations.write_text("".join(f"{sec:8.1f}  {name}\n" for sec, name in sorted(times, reverse=True)))
    print("\n== the 10 slowest tests (seconds, set-up and tear-down included)")
    for seconds, name in sorted(times, reverse=True)[:10]:
        print(f"{seconds:8.1f}  {name}")
    failed = [rc for rc in (rc_side, rc_alone) if rc not in (0, NO_TESTS)]
    if rc_side == rc_alone == NO_TESTS:
        failed.append(NO_TESTS)
    print(f"total: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
    return 1 if failed or total["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
