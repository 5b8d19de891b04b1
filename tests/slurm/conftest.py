"""The `slurm_cluster` fixture: a real munged + slurmctld + slurmd for one test (tests/slurm/cluster.py).

Skipped, with the reason, where not root or where slurm-wlm/munge are missing (in CI, a failure).
Another test folder can reuse it with `from cluster import SlurmCluster` after putting tests/slurm
on sys.path,.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import SlurmCluster, skip_reason


def need_slurm() -> None:
    reason = skip_reason()
    if reason is None:
        return
    # as tests/conftest.py's _unavailable: CI installs everything and runs as root
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must provide this: {reason}")
    pytest.skip(reason)


@pytest.fixture
def slurm_cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
    """A started one-node cluster (node `c.node`, idle); torn down with its jobs after the test."""
    need_slurm()
    with SlurmCluster(tmp_path) as c:
        yield c
