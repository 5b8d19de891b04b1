"""The fault soak's short run (bench/soak.py, whose long run is documented in docs/soak.md): 75 s of
metadata, chat, GPU, /proc, SIGHUP and kill -9 faults against the real agent, then one test per
check the soak makes, so that a failure names what broke."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow

SECONDS = 75
SEED = 11  # the schedule is seeded: each fault kind comes at least once in any seed
# checks the agent does not pass yet (xfail, not strict): they are run and shown, and turn into plain
# passes once fixed
KNOWN: dict[str, str] = {}  # the two found by the first long run (re-signal and re-alert after a
# reload that follows a restart) are fixed: a ledger never read is never written, replays are not alerted
CHECKS = (
    "every alert delivered (receiver: identities)",
    "no alert delivered twice (receiver), but ones resent after a kill -9",
    "every alert delivered once or counted (dingtalk: count, digests included)",
    "nothing left in the spool",
    "none failed for good",
    "one checkpoint signal per notice the agent saw",
    "one preemption alert per notice",
    "every task running at the start runs at the end",
    "RSS flat",
    "every start serves within 30 s",
    "clean exit on SIGTERM",
)


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("soak")  # logs, spool and ledger stay there for a post-mortem
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "soak.py"), "--seconds", str(SECONDS), "--seed", str(SEED),
         "--json", "--dir", str(work)],
        capture_output=True, text=True, timeout=SECONDS + 180, cwd=REPO,
    )  # fmt: skip
    assert out.stdout.strip(), out.stderr[-3000:]
    fig = json.loads(out.stdout)
    print(json.dumps({k: v for k, v in fig.items() if k != "checks"}, indent=1))
    return fig


def test_every_fault_kind_was_injected(figures: dict[str, Any]) -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from soak import FAULTS

    assert set(figures["faults"]) == set(FAULTS), figures["faults"]
    assert figures["notices"] >= 1 and figures["sighups"] >= 3
    assert figures["restarts"]["agent_processes"] == 1 + figures["faults"]["kill9"]
    # the faults did bite: the services refused requests and the agent retried them
    assert figures["alerts"]["refused_by_chat"] > 0 and figures["alerts"]["retried"] > 0, figures["alerts"]


def test_the_soak_checks_what_it_says(figures: dict[str, Any]) -> None:
    assert set(figures["checks"]) == set(CHECKS)


@pytest.mark.parametrize(
    "check",
    [
        pytest.param(c, marks=pytest.mark.xfail(reason=KNOWN[c], strict=False)) if c in KNOWN else c
        for c in CHECKS
    ],
)
def test_check(figures: dict[str, Any], check: str) -> None:
    problems = figures.get("problems"), figures["alerts"], figures["signals_per_notice"], figures["rss_kib"]
    assert figures["checks"][check], problems
