"""After an outage of the metadata service, every source of every cloud sees a notice that is present
when the service returns within poll_interval + 2 s, inside the request budget (the shipped defaults;
bench/preemption_recovery.py, whose short run this is, gives the 30 s figures)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

from agent.config import parse_config
from agent.context import Context
from agent.core.events import EventBus
from agent.preemption.watcher import MAX_BACKOFF_SECONDS, PreemptionWatcher
from agent.snapshot import NodeSnapshot


def test_every_source_recovers_within_poll_interval_plus_2s_inside_the_budget():
    # 12 s: longer than maintenance_interval (10 s), so the slow sources fail and back off as well
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "preemption_recovery.py"), "--outage", "12", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout[out.stdout.index("[\n") :])
    assert {r["provider"] for r in results} == {"alibaba", "aws", "gcp", "azure", "tencent"}
    for r in results:
        for source, seconds in r["recovery_seconds"].items():
            assert seconds is not None, f"{r['provider']} {source}: the notice was never seen"
            assert 0 <= seconds <= r["bound_seconds"], (r["provider"], source, seconds)
        assert r["max_requests_in_1s_after"] <= r["budget"], r
        assert r["attempts_per_second_during_outage"] <= r["budget"], r


def test_a_long_backoff_max_from_an_old_config_is_capped(tmp_path):
    """backoff_max = "30s" was the default: such a config still loads, and still waits 10 s at most."""
    cfg = parse_config(
        {"agent": {"state_dir": str(tmp_path)}, "preemption": {"provider": "aws", "backoff_max": "30s"}}
    )
    ctx = Context(cfg, EventBus(), lambda: NodeSnapshot(0, 0.0, 0.0), tmp_path, tmp_path / "run", [])
    w = PreemptionWatcher(ctx)
    waits = [w._backoff(n) for n in range(1, 30)]
    assert waits[0] <= cfg.preemption.poll_interval
    assert 0.8 * MAX_BACKOFF_SECONDS <= max(waits) <= MAX_BACKOFF_SECONDS  # grows to the cap, not past it
