"""configs/grafana/dashboard.json: every query names only metrics the agent really exports (learned from
the /metrics of a live agent with every part switched on), or recording rules of rules.yml, and
every query is valid PromQL."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO, need_binary
from grafana_queries import all_panels, dashboard, queries
from live_agent import exposition_names, live_agent
from promql_names import metric_names, recorded_names

RULES = REPO / "configs" / "prometheus" / "rules.yml"
PROMETHEUS_BUILTINS = {"up", "ALERTS", "ALERTS_FOR_STATE"}


def substituted(expr: str) -> str:
    """The expression as Grafana sends it: variables filled in."""
    expr = re.sub(r"\$__(rate_)?interval", "1m", expr)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    with live_agent(tmp_path_factory.mktemp("live")) as live:
        live.notice()
        return exposition_names(live.agent.metrics())


def test_extractor_finds_metric_names_only() -> None:
    q = (
        'sum by (class) (rate(foo_total{instance=~"$instance", a="b"}[5m]))'
        " / on (job) group_left (x) bar:baz:ratio offset 10m > 0.5 and ignoring (le) up == bool 1e3"
    )
    assert metric_names(q) == {"foo_total", "bar:baz:ratio", "up"}
    assert metric_names('label_values(training_node_build_info{training_job=~"$j"}, instance)') == {
        "training_node_build_info"
    }
    assert metric_names('histogram_quantile(0.9, sum by (le) (increase(x_bucket{d="false"}[6h])))') == {
        "x_bucket"
    }


def test_the_live_agent_exports_the_families_the_dashboard_is_about(exported: set[str]) -> None:
    for name in (
        "training_node_gpu_sm_active_ratio",
        "training_node_gpu_xid_errors_total",
        "training_node_rdma_receive_bytes_total",
        "training_node_preemption_deadline_timestamp_seconds",
        "training_node_checkpoint_duration_seconds_bucket",
        "training_node_bottleneck",
        "training_node_alerts_sent_total",
        "training_node_process_read_bytes_total",
    ):
        assert name in exported


def test_every_query_names_only_exported_metrics(exported: set[str]) -> None:
    known = exported | recorded_names(RULES.read_text()) | PROMETHEUS_BUILTINS
    bad = []
    for where, expr in queries(dashboard()):
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        unknown = names - known
        if unknown:
            bad.append(f"{where}: {sorted(unknown)} in {expr}")
    assert not bad, "metrics the agent does not export:\n" + "\n".join(bad)


def test_a_misspelt_metric_would_be_caught(exported: set[str]) -> None:
    known = exported | recorded_names(RULES.read_text())
    assert metric_names("rate(training_node_gpu_pcie_rx_byte_total[1m])") - known == {
        "training_node_gpu_pcie_rx_byte_total"
    }


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query (variables filled in) as a recording rule's expression."""
    promtool = need_binary("promtool", "prometheus")
    rules = [
        {"record": f"dashboard:query_{i}", "expr": substituted(expr)}
        for i, (_, expr) in enumerate(queries(dashboard()))
        if not expr.startswith("label_values(")
    ]
    (tmp_path / "q.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    r = subprocess.run([promtool, "check", "rules", "q.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(rules)} rules found" in r.stdout


def test_layout_covers_node_and_fleet_views() -> None:
    d = dashboard()
    rows = [p["title"] for p in d["panels"] if p["type"] == "row"]
    for topic in (
        "Fleet",
        "GPUs",
        "storage and NFS",
        "NIC and RDMA",
        "verdict",
        "preemption",
        "checkpoints",
        "goodput and cost",
    ):
        assert any(topic in r for r in rows), topic
    panels = [p for p in all_panels(d) if p["type"] != "row"]
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in panels}
    timeline = [p for p in panels if p["type"] == "state-timeline"]
    assert timeline and "training_node_bottleneck" in timeline[0]["targets"][0]["expr"]
    assert any("training_job_class:training_node_verdict_gpu_hours:share" in e for e in exprs.values())
    assert any("training_node_preemption_notice" in e for e in exprs.values())
    assert any("training_node_checkpoint_deadline_missed_total" in e for e in exprs.values())
    assert any("training_job:training_node_goodput:ratio1h" in e for e in exprs.values())
    assert any("instance_type:training_node_goodput:ratio1h" in e for e in exprs.values())
    assert any("training_job:training_node_cost:1d" in e for e in exprs.values())
    pace = exprs["Job's nodes ranked by pace, with their verdicts"]
    assert "instance:training_node_unsynced:ratio" in pace and "training_node_verdict_info" in pace
    ids = [p["id"] for p in all_panels(d)]
    assert len(ids) == len(set(ids))
    for p in all_panels(d):
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    names = [v["name"] for v in d["templating"]["list"]]
    assert names == ["datasource", "training_job", "instance"]
