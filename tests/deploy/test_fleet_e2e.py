"""The scale-out path: five real agents, each with its own fake GPUs and a training process on them,
scraped by one real Prometheus with our scrape config and rules. Job llama runs on four nodes of two
instance types, one of them the straggler; job bert's node has no training process. The fleet goodput
per job and per instance type come out of the recording rules, and JobStraggler names the slow node.

The transcript goes to bench/out/fleet_e2e.txt (and to stdout with ``pytest -s``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import REPO, AgentProcess, need_binary
from prom_support import PROM, Alertmanager, PrometheusServer, Transcript, inventory_target

from agent.config.classifier import ClassifierSection
from agent.devtools.fake_nvml import FakeNvml, device, library_dir

TRANSCRIPT = REPO / "bench" / "out" / "fleet_e2e.txt"
TYPE_A, TYPE_B = "ecs.gn8v.48xlarge", "ecs.gn7e-c16g1.32xlarge"
# name, training job, instance type, (utilization %, SM activity %) of each GPU, trains?
NODES = (
    ("i-llama-1", "llama", TYPE_A, (97, 86.0), True),
    ("i-llama-2", "llama", TYPE_A, (96, 84.0), True),
    ("i-llama-3", "llama", TYPE_B, (97, 85.0), True),
    ("i-llama-4", "llama", TYPE_B, (45, 20.0), True),  # the straggler: a fifth of the others' work
    ("i-bert-1", "bert", TYPE_A, (0, 0.0), False),  # paid for, no training process
)
STRAGGLER = "i-llama-4"
# the share of each tick the ledger books productive: SM activity over the full-work level (a tick is
# split by its shares, docs/goodput.md), so the straggler's SM 20% is a quarter of its time worked
WORKED = {
    name: min(1.0, sm / 100 / ClassifierSection().full_work_sm) if trains else 0.0
    for name, _, _, (_, sm), trains in NODES
}


def mean_worked(**where: str) -> float:
    """The fleet goodput the nodes matching ``where`` (job=..., itype=...) should show."""
    rows = [r for r in NODES if all(r[{"job": 1, "itype": 2}[k]] == v for k, v in where.items())]
    return sum(WORKED[r[0]] for r in rows) / len(rows)


def fast_straggler_rules(tmp: Path) -> Path:
    """rules.yml with JobStraggler's ``for`` cut from 5m to 3s: the same expression, fired in seconds."""
    doc = yaml.safe_load((PROM / "rules.yml").read_text())
    for g in doc["groups"]:
        for r in g["rules"]:
            if r.get("alert") == "JobStraggler":
                assert r["for"] == "5m"
                r["for"] = "3s"
    path = tmp / "rules.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[list[AgentProcess], PrometheusServer, Transcript]]:
    need_binary("prometheus", "prometheus")
    need_binary("cc", "build-essential")
    tmp = tmp_path_factory.mktemp("fleet")
    log = Transcript(TRANSCRIPT)
    lib = library_dir()
    trainers: list[subprocess.Popen] = []
    agents: list[AgentProcess] = []
    am = prom = None
    try:
        targets = []
        for name, job, itype, (util, sm), trains in NODES:
            d = tmp / name
            d.mkdir()
            procs = []
            if trains:
                # a rank of the fleet's job: its spin is a collective waiting (WORLD_SIZE: not one process)
                sleeper = [sys.executable, "-c", "import time; time.sleep(900)"]
                trainers.append(subprocess.Popen(sleeper, env={**os.environ, "WORLD_SIZE": str(len(NODES))}))
                procs = [{"pid": trainers[-1].pid}]
            nvml = FakeNvml(
                d / "nvml.json",
                gpus=[device(i, utilization_gpu=util, sm_active=sm, processes=procs) for i in range(2)],
            )
            agent = AgentProcess(
                d,
                {
                    "agent": {"interval": "500ms"},
                    "goodput": {"resolution": "1s", "window": "1m", "poll": "1s"},
                    # no metadata service here: the config names the instance type, the table prices it
                    "cost": {
                        "currency": "CNY",
                        "instance_type": itype,
                        "prices": {itype: {"spot": 40.0, "on_demand": 200.0}},
                    },
                    "classifier": {"enabled": False},
                },
                env={"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_STATE": str(nvml.path)},
            )
            agent.start()
            agents.append(agent)
            targets.append(inventory_target(agent.port, name, itype, "cn-wulanchabu-a", job))
            log(f"agent {name} on {agent.url}: job {job}, {itype}, 2 fake GPUs at {util}% util / {sm}% SM")
        am = Alertmanager(tmp, log)
        prom = PrometheusServer(tmp, targets, am, log, rules=fast_straggler_rules(tmp))
        yield agents, prom, log
    finally:
        if prom is not None:
            prom.stop()
        if am is not None:
            am.stop()
        for a in agents:
            a.stop()
            a._log.close()
        for t in trainers:
            t.kill()
            t.wait()
        log.save()


def by(label: str, result: list[dict]) -> dict[str, float]:
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in result}


def test_fleet_goodput_per_job_and_instance_type_from_the_rules(fleet) -> None:
    agents, prom, log = fleet
    up = prom.wait(lambda: len(prom.query('up{job="training-node-agent"} == 1')) == len(NODES), 60, "all up")
    assert up
    # every node's ledger in the rules (a node scraped once has no increase yet), a few scrapes deep
    prom.wait(
        lambda: (
            prom.query(
                'count(instance_bucket:training_node_gpu_seconds:increase1h{bucket="productive"} >= 0) == 5'
            )
            and prom.query(
                'min(count_over_time(training_node_gpu_seconds_unsettled{bucket="idle"}[1h])) >= 5'
            )
        ),
        60,
        "every node's ledger in the rules",
    )
    jobs = prom.wait(
        lambda: len(r := prom.query("training_job:training_node_goodput:ratio1h")) == 2 and r,
        60,
        "job goodput",
    )
    types = prom.wait(
        lambda: len(r := prom.query("instance_type:training_node_goodput:ratio1h")) == 2 and r,
        60,
        "type goodput",
    )
    per_job, per_type = by("training_job", jobs), by("instance_type", types)
    # what each agent's own ledger says, to set the fleet figures against
    own = {a.tmp.name: a.status()["goodput"] for a in agents}
    lines = [f"training_job:training_node_goodput:ratio1h {json.dumps(per_job)}"]
    lines.append(f"instance_type:training_node_goodput:ratio1h {json.dumps(per_type)}")
    lines += [f"  {n}: own ledger goodput {g['ratio']}, {g['gpu_seconds']:.0f} GPU-s" for n, g in own.items()]
    for line in lines:
        log(line)
    # three of llama's four nodes work, the straggler's GPUs work a quarter of the time; bert's node
    # has no job
    assert per_job["llama"] == pytest.approx(mean_worked(job="llama"), abs=0.08)
    assert per_job["bert"] == 0
    assert per_type[TYPE_A] == pytest.approx(mean_worked(itype=TYPE_A), abs=0.08)  # with bert's idle one
    assert per_type[TYPE_B] == pytest.approx(mean_worked(itype=TYPE_B), abs=0.08)
    assert own[STRAGGLER]["ratio"] == pytest.approx(WORKED[STRAGGLER], abs=0.02)
    assert own["i-llama-1"]["ratio"] == 1
    assert own["i-bert-1"]["buckets"]["no-job"] == own["i-bert-1"]["gpu_seconds"]

    hours = prom.query('training_job_bucket:training_node_gpu_hours:1d{training_job="llama"}')
    # the straggler's ticks: worked, spinning (utilization over its work: sync-wait, no traffic), starved
    booked = {r["metric"]["bucket"] for r in hours if float(r["value"][1]) > 0}
    assert booked == {"productive", "sync-wait", "idle"}
    cost = by("training_job", prom.wait(lambda: prom.query("training_job:training_node_cost:1d"), 30, "cost"))
    wasted = by("training_job", prom.query("training_job:training_node_cost_wasted:1d"))
    log(f"training_job:training_node_cost:1d {cost}; wasted {wasted}")
    # on-demand prices (no spot notice seen): 200 CNY per instance-hour, 4 nodes vs 1
    assert cost["bert"] > 0 and cost["llama"] == pytest.approx(4 * cost["bert"], rel=0.25)
    assert wasted["bert"] == pytest.approx(cost["bert"])


def test_the_straggler_alert_names_the_slow_node(fleet) -> None:
    _, prom, log = fleet
    firing = 'ALERTS{alertname="JobStraggler", alertstate="firing"}'
    (alert,) = prom.wait(lambda: prom.query(firing), 60, "JobStraggler firing")
    log(f"ALERTS: {json.dumps(alert['metric'])}")
    assert alert["metric"]["instance"] == STRAGGLER
    assert alert["metric"]["training_job"] == "llama"
    (detail,) = [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == "JobStraggler"]
    log(f"summary: {detail['annotations']['summary']!r}")
    assert detail["annotations"]["summary"] == f"{STRAGGLER} is the slow node of job llama"
