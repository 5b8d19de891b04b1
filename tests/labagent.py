"""The scenario lab with the real agent watching it, for the lab tests of every part (the
classifier's, the goodput ledger's): set up the lab, start the agent on its config, talk to it over
the control socket, and tear both down.

The classifier's lab and the ledger's score the same runs (no job, a regime change, checkpoints,
and the randomized draws): they share one lab and one agent (the ``shared_lab`` fixture in
conftest.py, started on first use, for the test modules marked ``shared_lab``), and a scenario both
score runs once (:meth:`LabAgent.run_shared`), its ledger read around it. The marked modules run one
after the other and the shared agent stops after the last of them (conftest.py's hooks)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from conftest import AgentProcess, need_binary, need_root

from agent.runtime.control import control_request
from lab.draws import (
    HELD_OUT_SEEDS,
    INPUT_HELD_OUT_SEEDS,
    INPUT_TUNE_SEEDS,
    LONG_HELD_OUT_SEEDS,
    LONG_TUNE_SEEDS,
    TUNE_SEEDS,
    draw,
    long_step_draw,
)
from lab.harness import Lab, Scenario, from_draw
from lab.scoring import Result

# the ledger's lab books each scenario at a 1 s resolution and settles nothing within the run
SHARED_CONFIG = {"goodput": {"resolution": "1s", "settle": "1h", "poll": "500ms"}}

# The randomized draws, on the held-out seeds (TNA_LAB_SEEDS=tune: the tuning ones): TNA_LAB_DRAWS of
# them (a modest sample in the suite, more for make lab) and TNA_LAB_INPUT_DRAWS of the input families,
# from their own seeds. The classifier's lab scores each run's verdicts, the ledger's lab its buckets.
CPUS = os.cpu_count() or 1
TUNING = os.environ.get("TNA_LAB_SEEDS") == "tune"
INPUT_SEEDS = INPUT_TUNE_SEEDS if TUNING else INPUT_HELD_OUT_SEEDS
DRAWN_SEEDS = (TUNE_SEEDS if TUNING else HELD_OUT_SEEDS)[: int(os.environ.get("TNA_LAB_DRAWS", "10"))] + (
    INPUT_SEEDS[: int(os.environ.get("TNA_LAB_INPUT_DRAWS", "2"))]
)
DRAWS = {s.name: s for s in (from_draw(draw(seed, CPUS)) for seed in DRAWN_SEEDS)}
INPUT_DRAWS = [n for n in DRAWS if int(n.split("#")[1]) in INPUT_SEEDS]
# steps of 0.1-2 s for an agent at its default settings (issue 32): TNA_LAB_LONG_DRAWS (none in the
# suite, whose budget has no room for 45 s a draw; make lab runs some)
LONG_SEEDS = (LONG_TUNE_SEEDS if TUNING else LONG_HELD_OUT_SEEDS)[
    : int(os.environ.get("TNA_LAB_LONG_DRAWS", "0"))
]
LONG_DRAWS = {
    d.name: replace(from_draw(d), defaults=True) for d in (long_step_draw(seed, CPUS) for seed in LONG_SEEDS)
}


@dataclass(frozen=True)
class LabRun:
    """One scenario's run: the classifier's scoring, and the ledger read before and after it."""

    result: Result
    ledger_before: dict
    ledger_after: dict
    wall: float  # seconds between the two ledger readings


class LabAgent:
    def __init__(self, lab: Lab, agent: AgentProcess) -> None:
        self.lab = lab
        self.agent = agent
        self.drill_report: dict = {}
        self.by_name: dict[str, Result] = {}  # the classifier lab's runs
        self.runs: dict[str, LabRun] = {}  # run_shared's

    def status(self) -> dict:
        return self.call("GET", "/status")["classifier"]

    def ledger(self) -> dict:
        return self.call("GET", "/goodput")

    def run_shared(self, sc: Scenario) -> LabRun:
        """``sc`` run once for every lab test that scores it (with a drill where it has one)."""
        if sc.name not in self.runs:
            before, started = self.ledger(), time.monotonic()
            res = self.lab.run(sc, self.history, self.drill)
            after, ended = self.ledger(), time.monotonic()
            self.runs[sc.name] = LabRun(res, before, after, ended - started)
        return self.runs[sc.name]

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 10) -> dict:
        code, out = asyncio.run(
            control_request(self.agent.control_socket, method, path, body, timeout=timeout)
        )
        assert code == 200, out
        return out

    def history(self) -> list[dict]:
        return self.call("GET", "/classifier/history")["evaluations"]

    def drill(self) -> dict:
        payload = {"kind": "spot-termination", "deadline_seconds": 120, "wait_seconds": 20}
        self.drill_report = self.call("POST", "/checkpoint/drill", payload, timeout=40)
        return self.drill_report


_shared: contextlib.ExitStack | None = None
_shared_session: LabAgent | None = None


def shared_lab(work: Callable[[], Path]) -> LabAgent:
    """The shared lab and its agent (LAB_CONFIG with the ledger's settings), started on first use
    in the directory ``work()`` makes."""
    global _shared, _shared_session
    if _shared_session is None:
        stack = contextlib.ExitStack()
        _shared_session = stack.enter_context(lab_agent(work(), SHARED_CONFIG))
        _shared = stack
    return _shared_session


def close_shared_lab() -> None:
    global _shared, _shared_session
    if _shared is not None:
        stack, _shared, _shared_session = _shared, None, None
        stack.close()


@contextlib.contextmanager
def lab_agent(
    work: Path, config: dict[str, Any] | None = None, prepare: Callable[[Lab], None] | None = None
) -> Iterator[LabAgent]:
    """The lab set up under ``work`` and the agent running on its config (updated with ``config``);
    ``prepare`` readies the lab before the agent's first look (the GPUs' product, say)."""
    need_root("the lab's cgroups, network namespaces and tc shaping")
    need_binary("ip", "iproute2")
    need_binary("tc", "iproute2")
    need_binary("losetup", "mount")
    lab = Lab(work / "lab")
    try:
        lab.setup()
        if prepare is not None:
            prepare(lab)
        agent_dir = work / "agent"
        agent_dir.mkdir()
        cfg = lab.agent_config(agent_dir / "run", config)
        agent = AgentProcess(agent_dir, cfg, env=lab.agent_env())
        agent.start()
        try:
            yield LabAgent(lab, agent)
        finally:
            agent.stop()
            agent._log.close()
    finally:
        lab.teardown()
