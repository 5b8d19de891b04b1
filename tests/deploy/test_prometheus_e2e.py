"""End to end with a real Prometheus: the agent (fake GPUs, metadata simulator) scraped through our
scrape config and evaluated with our rules; a spot notice in the simulator fires PreemptionImminent.

The run's transcript goes to bench/out/prometheus_e2e.txt (and to stdout with ``pytest -s``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import REPO, need_binary, wait_until
from grafana_queries import dashboard, queries
from live_agent import LiveAgent, live_agent
from prom_support import Alertmanager, PrometheusServer, Transcript, inventory_target

PROM = REPO / "configs" / "prometheus"
TRANSCRIPT = REPO / "bench" / "out" / "prometheus_e2e.txt"
INSTANCE_ID = "i-e2e0a1b2c3d4e5f6"
TRAINING_JOB = "llama-e2e"


@pytest.fixture(scope="module")
def transcript() -> Iterator[Transcript]:
    t = Transcript(TRANSCRIPT)
    yield t
    t.save()


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, transcript: Transcript
) -> Iterator[tuple[LiveAgent, PrometheusServer, Alertmanager]]:
    need_binary("prometheus", "prometheus")
    tmp = tmp_path_factory.mktemp("e2e")
    with live_agent(tmp) as live:
        transcript(
            f"agent on {live.agent.url}: 2 fake GPUs (LD_LIBRARY_PATH=build/fakenvml), "
            f"metadata-sim --provider alibaba on {live.sim.url}"
        )
        am = Alertmanager(tmp, transcript)
        try:
            target = inventory_target(
                live.agent.port, INSTANCE_ID, "ecs.gn7i-c8g1.2xlarge", "cn-hangzhou-i", TRAINING_JOB
            )
            prom = PrometheusServer(tmp, [target], am, transcript)
            try:
                yield live, prom, am
            finally:
                prom.stop()
        finally:
            am.stop()


def test_target_is_up_with_instance_metadata_as_labels(stack, transcript: Transcript) -> None:
    _, prom, _ = stack

    def up() -> list[dict[str, Any]]:
        active = prom.api("targets")["activeTargets"]
        return [t for t in active if t["health"] == "up"]

    (target,) = prom.wait(up, 30, "the agent target up")
    labels = target["labels"]
    transcript(f"target {target['scrapeUrl']} health={target['health']} labels={json.dumps(labels)}")
    assert labels["job"] == "training-node-agent"
    assert labels["instance"] == INSTANCE_ID  # relabelled from the inventory's instance metadata
    assert labels["training_job"] == TRAINING_JOB
    assert labels["instance_type"] == "ecs.gn7i-c8g1.2xlarge"
    assert labels["zone"] == "cn-hangzhou-i"
    assert not any(k.startswith("__meta") for k in labels)


def test_training_node_series_arrive(stack, transcript: Transcript) -> None:
    _, prom, _ = stack
    count = prom.wait(
        lambda: prom.query('count({__name__=~"training_node_.+", job="training-node-agent"})'),
        30,
        "training_node_* series",
    )
    n = int(float(count[0]["value"][1]))
    names = prom.api("label/__name__/values", **{"match[]": '{job="training-node-agent"}'})
    ours = sorted(x for x in names if x.startswith("training_node_"))
    transcript(f"{n} training_node_* series in {len(ours)} metric names, e.g. {', '.join(ours[:4])} ...")
    assert n > 50 and len(ours) > 50
    util = prom.query(f'training_node_gpu_utilization_ratio{{instance="{INSTANCE_ID}"}}')
    assert sorted(r["metric"]["gpu"] for r in util) == ["0", "1"]
    assert {r["metric"]["training_job"] for r in util} == {TRAINING_JOB}
    # the per-process series the scrape config drops at fleet scale
    assert not prom.query("training_node_gpu_process_memory_used_bytes")


def test_recording_rules_evaluate_on_real_series(stack, transcript: Transcript) -> None:
    _, prom, _ = stack
    gpus = prom.wait(lambda: prom.query("instance:training_node_gpus:count"), 30, "GPU count rule")
    assert float(gpus[0]["value"][1]) == 3  # the hung GPU 2 still counts: the node has it
    work = prom.wait(lambda: prom.query("instance:training_node_gpu_work:ratio"), 30, "GPU work rule")
    ratio = float(work[0]["value"][1])
    transcript(f"instance:training_node_gpu_work:ratio = {ratio:.3f} (SM activity 82% and 80%)")
    assert abs(ratio - 0.81) < 1e-6
    info = prom.query("training_node_instance_info")
    # the agent's own metadata (from the simulator) next to the inventory's target label
    assert info and info[0]["metric"]["instance_id"] == "i-sim0a1b2c3d4e5f6a7b"


def test_spot_notice_fires_preemption_imminent(stack, transcript: Transcript) -> None:
    live, prom, am = stack
    firing = 'ALERTS{alertname="PreemptionImminent", alertstate="firing"}'
    prom.wait(lambda: prom.query("up") and prom.query("training_node_preemption_notice"), 30, "notice gauge")
    assert prom.query(firing) == [], "no notice yet, nothing may fire"

    t0 = time.monotonic()
    ev = live.sim.control("/notice", {"kind": "spot-termination", "seconds": 300})
    shown = {k: ev.get(k) for k in ("id", "kind", "state", "deadline")}
    transcript(
        f"simulator: POST /_sim/notice {{kind: spot-termination, seconds: 300}} -> {json.dumps(shown)}"
    )
    alerts = prom.wait(lambda: prom.query(firing), 30, "PreemptionImminent firing")
    latency = time.monotonic() - t0
    (alert,) = alerts
    transcript(f"ALERTS: {json.dumps(alert['metric'])}")
    assert alert["metric"]["kind"] == "spot-termination"
    assert alert["metric"]["instance"] == INSTANCE_ID
    assert alert["metric"]["severity"] == "critical"
    (detail,) = [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == "PreemptionImminent"]
    summary = detail["annotations"]["summary"]
    transcript(f"summary: {summary!r}")
    transcript(f"notice -> alert firing in Prometheus: {latency:.2f}s (1s poll, scrape and evaluation)")
    assert summary.startswith(f"{INSTANCE_ID}: spot-termination notice, 4m")
    assert summary.endswith("left")

    # and on to Alertmanager, where routing to chat, PagerDuty and the like happens
    def delivered() -> list[dict[str, Any]]:
        return [a for a in am.alerts() if a["labels"].get("alertname") == "PreemptionImminent"]

    (routed,) = wait_until(delivered, 30, 0.2, "PreemptionImminent in Alertmanager", am.log)
    transcript(
        f"alertmanager: {routed['labels']['alertname']} {routed['status']['state']}, "
        f"receivers {[r['name'] for r in routed['receivers']]}, {time.monotonic() - t0:.2f}s after the notice"
    )
    assert routed["labels"]["instance"] == INSTANCE_ID and routed["status"]["state"] == "active"


def test_dashboard_queries_run_on_the_live_data(stack, transcript: Transcript) -> None:
    """Every panel query is accepted by Prometheus with the dashboard's variables filled in, and the
    node panels about the GPUs, the verdict and the notice show data."""
    _, prom, _ = stack
    prom.wait(lambda: prom.query("training_node_bottleneck == 1"), 30, "a verdict")
    prom.wait(
        lambda: prom.query("training_job_class:training_node_verdict_gpu_hours:share1h"), 30, "GPU-hour share"
    )
    prom.wait(lambda: prom.query("training_job:training_node_goodput:ratio1h"), 30, "fleet goodput")
    empty = []
    ran = 0
    for where, expr in queries(dashboard()):
        if expr.startswith("label_values("):
            continue
        q = expr.replace("$instance", INSTANCE_ID).replace("$training_job", TRAINING_JOB)
        result = prom.query(q)  # raises unless Prometheus accepts it
        ran += 1
        if not result:
            empty.append(where)
    transcript(f"dashboard: {ran} queries ran; empty on this node: {len(empty)} ({', '.join(empty)})")
    for must in (
        "'GPU utilization vs SM activity'",
        "'Power (of limit)'",
        "'Bottleneck verdict'",
        "'Verdict scores'",
        "'Preemption notices (time left)' A",
        "'GPUs in each verdict now'",
        "'GPU-hours by verdict, per job (share of the last hour)'",
        "'NIC throughput'",
        "'RDMA throughput'",  # the live agent's RDMA ports come from tests/fixtures' sysfs
        "'Collectors'",
        "'Goodput per job (last hour)'",
        "'Goodput per instance type (last hour)'",
        "'GPU-seconds per bucket on $instance'",
        "'Checkpoint cadence on $instance'",
    ):
        assert not any(must in w for w in empty), f"{must} shows no data"
    nodes = prom.api("label/instance/values", **{"match[]": "training_node_build_info"})
    assert nodes == [INSTANCE_ID]  # what the $instance variable offers
