"""The scenario lab with the real agent watching it, for the lab tests of every part (the
classifier's, the goodput ledger's): set up the lab, start the agent on its config, talk to it over
the control socket, and tear both down."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from conftest import AgentProcess, need_binary, need_root

from agent.runtime.control import control_request
from lab.harness import Lab


class LabAgent:
    def __init__(self, lab: Lab, agent: AgentProcess) -> None:
        self.lab = lab
        self.agent = agent
        self.drill_report: dict = {}

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


S = TypeVar("S", bound=LabAgent)


@contextlib.contextmanager
def lab_agent(
    work: Path, session: Callable[[Lab, AgentProcess], S], config: dict[str, Any] | None = None
) -> Iterator[S]:
    """The lab set up under ``work`` and the agent running on its config (updated with ``config``)."""
    need_root("the lab's cgroups, network namespaces and tc shaping")
    need_binary("ip", "iproute2")
    need_binary("tc", "iproute2")
    need_binary("losetup", "mount")
    lab = Lab(work / "lab")
    try:
        lab.setup()
        agent_dir = work / "agent"
        agent_dir.mkdir()
        cfg = lab.agent_config(agent_dir / "run", config)
        agent = AgentProcess(agent_dir, cfg, env=lab.agent_env())
        agent.start()
        try:
            yield session(lab, agent)
        finally:
            agent.stop()
            agent._log.close()
    finally:
        lab.teardown()
