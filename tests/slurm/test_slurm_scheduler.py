"""The scheduler action against the real Slurm (tests/slurm/cluster.py: munged, slurmctld, slurmd):
the real daemon, the metadata simulator, the fake NVML, and an `sbatch --requeue` job running a
tna_client trainer (agent/devtools/demo_trainer.py).

One cluster and one agent go through the phases in order (each a separate claim of issue 21), so
the file costs one cluster start and one agent start:
  A. spot notice -> the node is drained with the agent's reason within 2 s -> the trainer
     checkpoints and acks -> slurmctld has requeued the job (a --no-requeue job beside it is named
     in the log and the alert event, and left running) -> the notice is cancelled, the health
     gate holds -> the drain is lifted -> the requeued job runs again from its checkpoint's step;
  B. a lost fake GPU drains the node with the fault in the reason (health-check says so); the agent
     restarts without its state_dir and still owns the drain; the GPU's return plus the gate lifts it;
     an Xid 79 drains, and the drain goes once no Xid came for the hold time;
  C. slurmctld stopped during a notice: the checkpoint is still requested at once; the drain is set
     once slurmctld is back;
  D. an operator's drain, on another node and on this one, is never lifted or changed;
  E. a drill does no `scontrol update` and no requeue (slurmctld's own log and state say so);
  F. every NVML call hangs: the driver's Xid line written into the real /dev/kmsg drains the node with
     the Xid in the reason, once.
The dry-run agent is the second test.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster import SlurmCluster, need_slurm, slurm_cluster  # noqa: F401  (the fixture)
from conftest import REPO, AgentProcess, run_cli, wait_until

sys.path.insert(0, str(REPO / "tests" / "gpu"))
from kmsg_support import need_kmsg_writer, own_domain, write_xid

from agent.devtools.fake_nvml import HGX_BUSES, FakeNvml, library_dir
from agent.devtools.simprocess import MetadataSimProcess

pytestmark = [pytest.mark.root, pytest.mark.slow]

OPERATOR = "ops: bios update (alice)"
RESUME_AFTER = 3.0
HANG_MS = 8000  # each NVML call, in phase F: past the call timeout (2 s) and the collector's (5 s)


@pytest.fixture
def cluster_with_other_node(tmp_path: Path):
    """The cluster plus a second node (no slurmd) that an operator drains for the whole test."""
    need_slurm()
    with SlurmCluster(tmp_path, extra_nodes=1) as c:
        yield c


@pytest.fixture
def sim(tmp_path: Path):
    p = MetadataSimProcess(tmp_path / "metadata-sim.log", "alibaba")
    yield p
    p.stop()


class Job:
    """The trainer as a Slurm batch job: its events file and its output (appended across runs)."""

    def __init__(self, c: SlurmCluster, tmp: Path) -> None:
        self.c = c
        self.ckpt = tmp / "ckpt"
        self.events_path = tmp / "events.jsonl"
        self.out = tmp / "job.out"
        self.request_file = tmp / "cp" / "request.json"
        script = tmp / "train.sh"
        script.write_text(
            "#!/bin/sh\n"
            f"export PYTHONPATH={REPO}:{REPO / 'client'}\n"
            f"exec {sys.executable} -m agent.devtools.demo_trainer --checkpoint-dir {self.ckpt} "
            f"--request-file {self.request_file} --events {self.events_path} --resume --keep-going "
            "--step-seconds 0.05 --save-seconds 0.3 --print-every 100000\n"
        )
        script.chmod(0o755)
        self.id = c.sbatch(
            "--requeue", "-J", "llama-7b", "-o", str(self.out), "--open-mode=append", str(script)
        )

    @property
    def marker(self) -> str:
        return re.escape(str(self.ckpt))

    def events(self, kind: str) -> list[dict]:
        if not self.events_path.exists():
            return []
        lines = self.events_path.read_text().splitlines()
        return [e for e in map(json.loads, filter(None, lines)) if e["event"] == kind]

    def restarts(self) -> int:
        return int(self.c.job_field(self.id, "Restarts") or 0)


def _agent(tmp: Path, c: SlurmCluster, sim: MetadataSimProcess, job: Job, fake: FakeNvml, **sched: object):
    cfg = {
        "agent": {"interval": "250ms", "collector_failing_after": "1h"},
        "gpu": {"pcie_degraded_hold": "1s"},  # then the next slow read (5 s) raises it
        "preemption": {"provider": "alibaba", "endpoint": sim.url, "poll_interval": "250ms"},
        "trainer": {"discover": [f"cmdline:{job.marker}"], "request_file": str(job.request_file)},
        "scheduler": {
            "kind": "slurm",
            "node_name": c.node,
            "resume_after": f"{RESUME_AFTER:g}s",
            "poll_interval": "500ms",
            "command_timeout": "5s",
            "retry_max": "1s",
            **sched,
        },
    }
    env = {**c.env, "LD_LIBRARY_PATH": str(library_dir()), "FAKE_NVML_STATE": str(fake.path)}
    (tmp / "agent").mkdir()
    agent = AgentProcess(tmp / "agent", cfg, env).start(wait=False)
    try:
        agent.wait_ready(90)  # generous: beside stress-ng and a loaded suite, a start can take long
    except BaseException:
        agent.kill9()
        raise
    return agent


def _updates(c: SlurmCluster) -> int:
    """slurmctld's own record of node updates and requeues (its log at SlurmctldDebug=info)."""
    log = c.log("slurmctld")
    return len(re.findall(r"update_node: node \S+ (?:reason set to|state set to)|Requeuing JobId", log))


def _health(agent: AgentProcess) -> subprocess.CompletedProcess[str]:
    return run_cli("health-check", "--control-socket", agent.control_socket, timeout=15)


def _logged(agent: AgentProcess) -> list[dict]:
    """Every JSON line of the agent's log, across its restarts (log_lines keeps only the tail)."""
    out = []
    for line in agent.log_path.read_text(errors="replace").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


def _metric(agent: AgentProcess, action: str, outcome: str) -> float:
    m = re.search(
        rf'^training_node_scheduler_actions_total\{{action="{action}",outcome="{outcome}"\}} (\S+)$',
        agent.metrics(),
        re.M,
    )
    return float(m.group(1)) if m else 0.0


def test_scheduler_drains_requeues_and_resumes_on_a_real_slurm(cluster_with_other_node, sim, tmp_path):
    c: SlurmCluster = cluster_with_other_node
    [other] = c.extra_nodes
    c.run("scontrol", "update", f"nodename={other}", "state=drain", f"reason={OPERATOR}")
    other_before = c.show_node(other)
    need_kmsg_writer()
    fake = FakeNvml(tmp_path / "nvml.json", gpus=2)
    domain = own_domain()  # the agents of tests beside this one read the same kernel log
    for i in range(2):
        fake.set(i, pci_bus_id=f"{domain:08X}:{HGX_BUSES[i]:02X}:00.0")
    job = Job(c, tmp_path)
    pinned = c.sbatch("--no-requeue", "-J", "eval", "-o", "/dev/null", "--wrap", "sleep 600")
    c.wait_until(lambda: c.jobs().get(job.id) == c.jobs().get(pinned) == "RUNNING", 30, "jobs running")
    agent = _agent(tmp_path, c, sim, job, fake, drain_on_degraded=["pcie-degraded"])
    try:
        wait_until(lambda: job.events("started"), 30, what="trainer started")
        agent.wait_for(lambda: agent.status()["checkpoint"]["targets"], 20, what="the trainer found")
        agent.wait_for(lambda: agent.status()["scheduler"]["state"], 20, what="the node read")
        assert _health(agent).returncode == 0

        # A. the spot notice drains the node within 2 s
        t0 = time.monotonic()
        notice = sim.control("/notice", {"kind": "spot-termination", "seconds": 120})
        wait_until(lambda: c.node_reason().startswith("tna: spot-termination at "), 10, 0.05, "drain")
        drained_in = time.monotonic() - t0
        assert drained_in <= 2.0, f"sinfo -R showed the reason {drained_in:.2f}s after the notice"
        print(f"figure: sinfo -R showed the agent's reason {drained_in:.2f}s after the notice")
        assert re.fullmatch(r"tna: spot-termination at \d\d:\d\d:\d\dZ", c.node_reason())
        assert "DRAIN" in c.show_node()
        h = _health(agent)
        assert h.returncode == 1 and h.stderr.count("\n") == 1 and "spot-termination" in h.stderr
        # the trainer checkpoints and acks; then slurmctld requeues the job
        [ack] = wait_until(lambda: job.events("ack"), 20, what="the trainer's ack")
        agent.wait_for(lambda: job.restarts() == 1, 20, what="the job requeued")
        assert c.jobs()[job.id] in ("PENDING", "COMPLETING")  # the node is drained: it waits
        assert _metric(agent, "requeue", "ok") == 1 and _metric(agent, "drain", "ok") == 1
        # the --no-requeue job is left alone, named in the log and in the alert event
        assert c.jobs()[pinned] == "RUNNING" and c.job_field(pinned, "Restarts") == "0"
        assert _metric(agent, "requeue", "refused") == 1
        named = f"job {pinned} `eval` (root)"
        assert any(ln.get("job") == named for ln in _logged(agent))
        [alert] = [e for e in _logged(agent) if e.get("type") == "scheduler"]
        assert alert["problem"] == "not-requeueable" and alert["jobs"] == [named]
        c.run("scancel", str(pinned))
        # the notice is cancelled and the gate holds: the drain is lifted, the job runs again
        t1 = time.monotonic()
        sim.control("/cancel", {"id": notice["id"]})
        agent.wait_for(lambda: "DRAIN" not in c.show_node(), 20, what="the drain lifted")
        assert time.monotonic() - t1 >= RESUME_AFTER - 0.5  # held for resume_after first
        assert c.node_reason() == ""
        # slurmctld holds a requeued batch job for 120 s (BeginTime); the test moves that up
        c.run("scontrol", "update", f"jobid={job.id}", "starttime=now")
        agent.wait_for(lambda: job.events("resumed"), 30, what="the requeued job resumed")
        assert job.events("resumed")[0]["step"] == ack["step"]
        assert f"resumed from step {ack['step']}" in job.out.read_text()
        assert _metric(agent, "resume", "ok") == 1

        # B. a lost GPU drains with the fault in the reason; its return and the gate lift it
        fake.set(1, lost=True)
        agent.wait_for(lambda: re.fullmatch(r"tna: gpu 1 .*lost", c.node_reason()), 10, what="gpu drain")
        h = _health(agent)
        assert h.returncode == 1 and "GPU 1 missing" in h.stderr
        # a restart that lost its state_dir still knows the drain is its own (the reason says so)
        assert agent.stop(15) == 0
        shutil.rmtree(agent.state_dir)
        agent.start(wait=False).wait_ready(90)
        agent.wait_for(lambda: agent.status()["scheduler"]["owner"] == "agent", 20, what="read back")
        fake.set(1, lost=False)
        agent.wait_for(lambda: "DRAIN" not in c.show_node(), 20, what="the gpu drain lifted")
        assert _health(agent).returncode == 0
        # a fatal Xid drains at once; with no other in the hold time, the drain goes by itself
        fake.add_xid(0, 79)
        agent.wait_for(lambda: c.node_reason().startswith("tna: xid 79 on gpu 0"), 10, what="xid drain")
        t3 = time.monotonic()
        agent.wait_for(lambda: "DRAIN" not in c.show_node(), 30, what="the xid drain lifted")
        assert time.monotonic() - t3 >= RESUME_AFTER  # the Xid's hold, then the gate's
        # a GPU that runs slow drains only where the operator chose it (drain_on_degraded): its PCIe
        # link trained down to x8 drains for as long as it lasts, with the evidence in the reason
        fake.set(1, pcie_link_width=8)
        agent.wait_for(
            lambda: c.node_reason().startswith("tna: pcie-degraded on gpu 1"), 20, what="the degraded drain"
        )
        assert "x8 of Gen" in c.node_reason() and "x16" in c.node_reason(), c.node_reason()
        fake.set(1, pcie_link_width=16)
        agent.wait_for(lambda: "DRAIN" not in c.show_node(), 30, what="the degraded drain lifted")

        # C. slurmctld down during a notice: the checkpoint is requested at once, the drain waits
        c.stop_ctld()
        signals = len(job.events("signal"))
        t2 = time.monotonic()
        notice2 = sim.control("/notice", {"kind": "spot-termination", "seconds": 120})
        wait_until(lambda: len(job.events("signal")) > signals, 10, 0.05, "the checkpoint request")
        requested_in = time.monotonic() - t2
        assert requested_in < 3.0, f"the checkpoint request took {requested_in:.2f}s with slurmctld down"
        print(f"figure: checkpoint request {requested_in:.2f}s after the notice, slurmctld down")
        agent.wait_for(lambda: agent.status()["scheduler"]["error"], 20, what="the failure seen")
        wait_until(lambda: len(job.events("ack")) == 2, 20, what="the second ack")
        # the wanted drain was tried and counted as failed (each try waits out scontrol's timeout)
        agent.wait_for(lambda: _metric(agent, "drain", "failed") >= 1, 30, what="a failed drain counted")
        c.start_ctld()
        agent.wait_for(lambda: c.node_reason().startswith("tna: spot-termination"), 30, what="late drain")

        # alerted once for the outage (however many retries), and once when Slurm answered again (said
        # when the round that set the drain ends, a moment after sinfo shows it)
        def failing() -> list[dict]:
            return [e for e in _logged(agent) if e.get("type") == "scheduler" and e["problem"] == "failing"]

        agent.wait_for(lambda: len(failing()) >= 2, 20, what="the outage's end alerted")
        assert [e["cleared"] for e in failing()] == [False, True], failing()
        sim.control("/cancel", {"id": notice2["id"]})
        agent.wait_for(lambda: "DRAIN" not in c.show_node(), 30, what="the drain lifted again")

        # D. an operator's drain on this node: the agent wants it drained, then not; it stays as set
        c.run("scontrol", "update", f"nodename={c.node}", "state=drain", f"reason={OPERATOR}")
        fake.set(0, lost=True)
        agent.wait_for(lambda: agent.status()["scheduler"]["causes"], 10, what="the gpu cause")
        agent.wait_for(lambda: _metric(agent, "drain", "foreign") == 1, 10, what="the foreign drain seen")
        assert agent.status()["scheduler"]["owner"] == "foreign"
        fake.set(0, lost=False)
        agent.wait_for(lambda: not agent.status()["scheduler"]["causes"], 10, what="the cause gone")
        time.sleep(RESUME_AFTER + 1.5)  # past the gate's hold: the agent would have lifted its own
        assert c.node_reason() == OPERATOR and "DRAIN" in c.show_node()
        c.run("scontrol", "update", f"nodename={c.node}", "state=resume")

        # E. a drill: says what it would drain and requeue, changes nothing in slurmctld
        assert job.restarts() == 2  # phase C's notice requeued it too, once slurmctld was back
        c.run("scontrol", "update", f"jobid={job.id}", "starttime=now")
        agent.wait_for(lambda: c.jobs().get(job.id) == "RUNNING", 30, what="the job running")
        before, restarts = _updates(c), job.restarts()
        drill = run_cli("drill", "--control-socket", agent.control_socket, "--deadline", "20s", timeout=60)
        assert f"scheduler (dry run): would drain {c.node}: tna: spot-termination at" in drill.stdout
        assert f"would requeue job {job.id} `llama-7b` (root)" in drill.stdout, drill.stdout + drill.stderr
        assert _updates(c) == before and job.restarts() == restarts and "DRAIN" not in c.show_node()
        # the operator's drain on the other node: untouched through all of it (same text, same
        # [user@time] stamp Slurm put on it when the operator set it)
        after = c.show_node(other)
        assert "DRAIN" in after.split(" State=")[1].split()[0]
        assert after.split(" Reason=")[1] == other_before.split(" Reason=")[1]
        assert c.node_reason(other) == OPERATOR

        # F. every NVML call hangs; the driver's Xid line in the kernel log drains the node all the same
        for i in range(2):
            fake.set(i, delay_ms=HANG_MS)
        agent.wait_for(lambda: agent.status()["gpu-health"]["unresponsive"] == [0, 1], 30, what="GPUs hung")
        write_xid(domain, HGX_BUSES[1], 79)
        agent.wait_for(lambda: c.node_reason().startswith("tna: xid 79 on gpu 1"), 10, what="kernel's xid")
        assert [e["gpu"] for e in agent.status()["recent_events"] if e.get("xid") == 79].count(1) == 1
        assert agent.status()["gpu-health"]["xids_seen"]["kernel-log"] == 1
    finally:
        for i in range(2):
            fake.set(i, delay_ms=0)
        agent.stop(15)


def test_dry_run_changes_nothing_in_slurm(slurm_cluster, sim, tmp_path):  # noqa: F811
    c: SlurmCluster = slurm_cluster
    fake = FakeNvml(tmp_path / "nvml.json", gpus=1)
    job = Job(c, tmp_path)
    c.wait_until(lambda: c.jobs().get(job.id) == "RUNNING", 30, "job running")
    # kind auto: scontrol is on PATH and a slurmd runs here, so Slurm it is
    agent = _agent(tmp_path, c, sim, job, fake, dry_run=True, kind="auto")
    try:
        agent.wait_for(lambda: agent.status()["checkpoint"]["targets"], 20, what="the trainer found")
        # the part says slurm once it is set up (slurmd -C named the node): wait for that, not the trainer
        agent.wait_for(lambda: agent.status()["scheduler"]["kind"] == "slurm", 20, what="Slurm detected")
        before = _updates(c)
        sim.control("/notice", {"kind": "spot-termination", "seconds": 120})
        wait_until(lambda: job.events("ack"), 20, what="the trainer's ack")
        agent.wait_for(lambda: _metric(agent, "requeue", "dry-run") == 1, 10, what="the dry requeue")
        assert _metric(agent, "drain", "dry-run") == 1 and _metric(agent, "drain", "ok") == 0
        assert "DRAIN" not in c.show_node() and job.restarts() == 0 and _updates(c) == before
        assert c.jobs()[job.id] == "RUNNING"
        said = [ln for ln in _logged(agent) if str(ln.get("event", "")).startswith("dry run")]
        assert any("would drain" in ln["event"] for ln in said), said
    finally:
        agent.stop(15)
