"""configs/prometheus: promtool checks the rules and the scrape configs, and runs the rule unit tests,
which must give input series for every alert."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO, need_binary

PROM = REPO / "configs" / "prometheus"


@pytest.fixture(scope="module")
def promtool() -> str:
    return need_binary("promtool", "prometheus")


def _promtool(promtool: str, *args: str, cwd: Path = PROM) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def alert_rules() -> list[dict]:
    doc = yaml.safe_load((PROM / "rules.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_check_rules(promtool: str) -> None:
    r = _promtool(promtool, "check", "rules", "rules.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_rule_unit_tests_pass(promtool: str) -> None:
    r = _promtool(promtool, "test", "rules", "rules_test.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_long_window_rule_tests_pass(promtool: str) -> None:
    """The goodput and cost rules over a day and the interruption rate over 30 days."""
    r = _promtool(promtool, "test", "rules", "rules_test_long.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_straggler_rule_tests_pass(promtool: str) -> None:
    """TrainingJobStraggler: one straggler, a single-node job, two equal stragglers, a node that just
    joined, a job whose step figures are missing on one node."""
    r = _promtool(promtool, "test", "rules", "rules_test_straggler.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_the_straggler_tests_catch_a_node_that_just_joined(promtool: str, tmp_path: Path) -> None:
    """The tests bind: without the guard for a node whose step figures are new, the just-joined case fails."""
    shutil.copy(PROM / "rules_test_straggler.yml", tmp_path)
    rules = (PROM / "rules.yml").read_text()
    guard = "and on (job, instance) max by (job, instance) (training_node_train_steps_total offset 2m)\n"
    assert guard in rules
    (tmp_path / "rules.yml").write_text(rules.replace(guard, "\n"))
    r = _promtool(promtool, "test", "rules", "rules_test_straggler.yml", cwd=tmp_path)
    assert r.returncode != 0 and 'instance="j"' in r.stdout + r.stderr


def test_goodput_rules_are_tested() -> None:
    """Every goodput, cost and interruption recording rule appears in a unit test, itself or through a
    tested rule built on it."""
    doc = yaml.safe_load((PROM / "rules.yml").read_text())
    exprs = {r["record"]: r["expr"] for g in doc["groups"] for r in g["rules"] if "record" in r}
    ours = [
        r for r in exprs if any(k in r for k in ("goodput", "cost", "mtbi", "gpu_hours:1d", "gpu_seconds"))
    ]
    text = "".join(
        (PROM / f).read_text() for f in ("rules_test.yml", "rules_test_long.yml", "rules_test_straggler.yml")
    )
    covered = {r for r in exprs if f"expr: {r}\n" in text or f"expr: {r}{{" in text}
    while True:
        more = {r for r in exprs if r not in covered and any(r in exprs[c] for c in covered)}
        if not more:
            break
        covered |= more
    assert len(ours) >= 10
    assert not [r for r in ours if r not in covered], "recording rules without a unit test"


def test_every_alert_rule_is_shown_firing() -> None:
    """Each alert rule (a name may have several, told apart by their labels) has a unit test where it
    fires, so every alert gets input series."""
    tests = [
        t
        for f in ("rules_test.yml", "rules_test_straggler.yml")
        for t in yaml.safe_load((PROM / f).read_text())["tests"]
    ]
    fired: list[dict[str, str]] = []
    for t in tests:
        for case in t.get("alert_rule_test", []):
            for exp in case.get("exp_alerts") or []:
                fired.append({"alertname": case["alertname"], **exp["exp_labels"]})
    for rule in alert_rules():
        want = {"alertname": rule["alert"], **rule.get("labels", {})}
        assert any(want.items() <= f.items() for f in fired), f"no unit test shows {want} firing"


def test_issue_alerts_exist() -> None:
    names = {r["alert"] for r in alert_rules()}
    assert {
        "PreemptionImminent",
        "CheckpointMissedDeadline",
        "NodeDataBound",
        "NodeNetworkBound",
        "GPUFault",
        "AgentDown",
        "JobStraggler",
        "TrainingJobStraggler",
    } <= names
    by_name = {r["alert"]: r for r in alert_rules()}
    assert by_name["NodeDataBound"]["for"] == "10m" and by_name["NodeNetworkBound"]["for"] == "10m"
    assert by_name["PreemptionImminent"]["for"] == "0s"  # a spot notice leaves minutes
    assert {r["labels"]["fault"] for r in alert_rules() if r["alert"] == "GPUFault"} == {"xid", "lost", "ecc"}


def test_unit_tests_catch_a_changed_rule(promtool: str, tmp_path: Path) -> None:
    """The unit tests bind: NodeDataBound waiting 20 instead of 10 minutes fails them."""
    shutil.copy(PROM / "rules_test.yml", tmp_path)
    rules = (PROM / "rules.yml").read_text()
    marker = (
        '- alert: NodeDataBound\n        expr: training_node_bottleneck{class="data"} == 1\n        for: 10m'
    )
    assert marker in rules
    (tmp_path / "rules.yml").write_text(rules.replace(marker, marker.replace("10m", "20m")))
    r = _promtool(promtool, "test", "rules", "rules_test.yml", cwd=tmp_path)
    assert r.returncode != 0 and "NodeDataBound" in r.stdout + r.stderr


def test_scrape_config_is_valid(promtool: str) -> None:
    r = _promtool(promtool, "check", "config", "scrape.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    job = yaml.safe_load((PROM / "scrape.yml").read_text())["scrape_configs"][0]
    assert job["job_name"] == "training-node-agent"  # AgentDown's selector
    targets = {rc.get("target_label") for rc in job["relabel_configs"]}
    assert {"training_job", "instance_type", "instance"} <= targets


def test_kubernetes_scrape_config_is_valid(promtool: str, tmp_path: Path) -> None:
    """Debian's Prometheus is built without Kubernetes SD, so promtool checks everything else: the same
    job with the SD block swapped for a static target."""
    doc = yaml.safe_load((PROM / "scrape-kubernetes.yml").read_text())
    job = doc["scrape_configs"][0]
    sd = job.pop("kubernetes_sd_configs")
    assert sd[0]["role"] == "pod" and sd[0]["attach_metadata"] == {"node": True}
    job["static_configs"] = [{"targets": ["127.0.0.1:9477"]}]
    shutil.copy(PROM / "rules.yml", tmp_path)
    (tmp_path / "scrape.yml").write_text(yaml.safe_dump(doc))
    r = _promtool(promtool, "check", "config", "scrape.yml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    relabels = {rc.get("target_label"): rc["source_labels"][0] for rc in job["relabel_configs"]}
    assert relabels["instance_type"] == "__meta_kubernetes_node_label_node_kubernetes_io_instance_type"
    assert relabels["training_job"] == "__meta_kubernetes_node_label_training_job"


def test_alertmanager_config_is_valid_and_sends_one_straggler_message_per_job(tmp_path: Path) -> None:
    amtool = need_binary("amtool", "prometheus-alertmanager")
    r = subprocess.run(
        [amtool, "check-config", str(PROM / "alertmanager.yml")], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # two stragglers of one job and one of another: amtool's route test groups them per job
    doc = yaml.safe_load((PROM / "alertmanager.yml").read_text())
    (straggler,) = [x for x in doc["route"]["routes"] if "TrainingJobStraggler" in x["matchers"][0]]
    assert straggler["group_by"] == ["alertname", "training_job"]
