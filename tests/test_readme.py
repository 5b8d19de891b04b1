"""The README is the metrics contract: every name a live agent exports is documented there, and every
documented name is exported (by an agent with every part switched on), so the docs cannot go stale."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from conftest import REPO

sys.path.insert(0, str(Path(__file__).resolve().parent / "deploy"))
from live_agent import exposition_names, live_agent

README = (REPO / "README.md").read_text()
DOCUMENTED = set(re.findall(r"^\| `(training_node_[a-z0-9_]+)` \|", README, re.M))
SUFFIXES = ("_bucket", "_count", "_sum", "_created")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    with live_agent(tmp_path_factory.mktemp("readme")) as live:
        live.notice()
        live.agent.wait_for(lambda: "training_node_preemption_notice{" in live.agent.metrics(), what="notice")
        # the identity is read beside the notice loops: on a loaded machine it may come second
        live.agent.wait_for(lambda: "training_node_instance_info{" in live.agent.metrics(), what="identity")
        return {n for n in exposition_names(live.agent.metrics()) if n.startswith("training_node_")}


def _family(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in DOCUMENTED:
            return name.removesuffix(suffix)
    return name


def test_readme_opens_with_the_two_commands():
    head = README.split("## ", 1)[0]
    assert "make run" in head and "make test" in head


def test_every_exported_metric_is_documented(exported):
    missing = sorted({_family(n) for n in exported} - DOCUMENTED)
    assert not missing, f"exported but not in README's metrics reference: {missing}"
    assert len(exported) > 60  # the live agent really had everything switched on


def test_every_documented_metric_is_exported(exported):
    # the live agent has every part switched on, so a documented name it does not export is stale
    stale = sorted(DOCUMENTED - {_family(n) for n in exported})
    assert not stale, f"in README's metrics reference but not exported: {stale}"
