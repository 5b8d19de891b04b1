"""Training "nodes" for the live straggler test: each a network namespace on a bridge of its own
(198.18.<o>.0/24, the host at .1), with its own agent (its own fake NVML state, state and runtime
folders, metrics port on its address) and its own block device to read from; a real torchrun job
across them (gloo, c10d rendezvous) whose ranks call ``guard.step()``; a real cgroup that throttles
one node's reads and tc that caps one node's link. Names carry the pid, so two runs never meet."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conftest import REPO, free_port, unix_get, write_toml

from agent.core.statefile import write_atomic
from agent.devtools.fake_nvml import library_dir
from lab.blockdev import DataSource, make_data
from lab.cgroups import TrainerCgroup
from lab.gpu import LabGpus

JOB = REPO / "lab" / "stragglerjob.py"
UNTHROTTLED = 10 << 30  # bytes/s: a limit no loop device reaches
GPUS = 4  # per node: one slow GPU among them is named only beside peers that wait for it
CLASSIFIER = {
    "window": "5s",  # 25 samples at 200 ms: a slow GPU is named over 20 or more (classifier/slowgpu.py)
    "evaluate_every": "1s",
    "confirmations": 2,
    "warmup": "2s",
    "min_window_fill": 0.3,
    "sustain": "2s",
}


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return out


@dataclass
class Node:
    index: int
    tag: str
    octet: int
    work: Path
    name: str = ""
    port: int = field(default_factory=free_port)
    agent: subprocess.Popen[bytes] | None = None
    trainer: subprocess.Popen[bytes] | None = None
    data: DataSource | None = None
    cgroup: TrainerCgroup | None = None

    def __post_init__(self) -> None:
        self.name = f"node-{'abc'[self.index]}"
        self.ns = f"tns{self.tag}{self.index}"
        self.host_if = f"tnh{self.tag}{self.index}"
        self.if_name = f"tnn{self.tag}{self.index}"  # not veth*: the agent skips those by default
        self.ip = f"198.18.{self.octet}.{10 + self.index}"
        self.dir = self.work / self.name
        self.dir.mkdir(parents=True)
        self.gpus = LabGpus(self.dir / "nvml.json", gpus=GPUS, gpm="all")
        self.degrade_file = self.dir / "degrade.json"
        self.request_file = self.dir / "run" / "checkpoint" / "request.json"

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}"

    def up(self, bridge: str) -> None:
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.if_name, "netns", self.ns)
        sh("ip", "link", "set", self.host_if, "master", bridge, "up")
        sh("ip", "-n", self.ns, "addr", "add", f"{self.ip}/24", "dev", self.if_name)
        sh("ip", "-n", self.ns, "link", "set", self.if_name, "up")
        sh("ip", "-n", self.ns, "link", "set", "lo", "up")
        self.data = make_data(self.dir, 64 << 20)
        self.cgroup = TrainerCgroup(f"tna-straggler-{self.tag}-{self.index}", self.data.device, UNTHROTTLED)
        self.cgroup.create()

    def start_agent(self, prometheus_url: str = "") -> None:
        cfg = {
            "agent": {
                "interval": "200ms",
                "state_dir": str(self.dir / "state"),
                "runtime_dir": str(self.dir / "run"),
                "log_format": "json",
            },
            "http": {
                "listen": f"{self.ip}:{self.port}",
                "control_socket": str(self.dir / "run" / "control.sock"),
            },
            "trainer": {"discovery_file": str(self.dir / "run" / "agent.json"), "step_report": "1s"},
            "preemption": {"provider": "none"},
            "classifier": CLASSIFIER,
            "cost": {"currency": "CNY", "instance_hour_price": 36.0},
        }
        if prometheus_url:
            cfg["fleet"] = {"prometheus_url": prometheus_url, "poll": "1s", "timeout": "2s"}
        path = write_toml(self.dir / "agent.toml", cfg)
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "LD_LIBRARY_PATH": str(library_dir()),
            "FAKE_NVML_STATE": str(self.gpus.path),
        }
        with open(self.dir / "agent.log", "ab") as log:
            self.agent = subprocess.Popen(
                ["ip", "netns", "exec", self.ns, sys.executable, "-m", "agent", "run", "--config", str(path)],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def status(self) -> dict[str, Any]:
        code, body = unix_get(str(self.dir / "run" / "control.sock"), "/status")
        assert code == 200, body
        return json.loads(body)

    def metrics(self) -> str:
        assert self.agent is not None and self.agent.poll() is None, self.log()
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            return r.read().decode()

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.dir / "agent.log").read_text(errors="replace")[-6000:]
        return ""

    def start_trainer(
        self, master: Node, rdzv_port: int, job: str, stop_file: Path, elems: int = 4096
    ) -> None:
        assert self.data is not None and self.cgroup is not None
        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
        cmd = ["ip", "netns", "exec", self.ns, torchrun, "--nnodes", "2", "--nproc-per-node", "1"]
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{master.ip}:{rdzv_port}", "--rdzv-id", job]
        # the store's host, and the address the workers meet at: torchrun would look both up by the
        # host name, whose addresses are not this namespace's
        cmd += ["--rdzv-conf", f"is_host={'true' if self is master else 'false'}", "--local-addr", self.ip]
        cmd += [
            "--max-restarts",
            "0",
            str(JOB),
            "--data",
            str(self.data.path),
            "--gpu-state",
            str(self.gpus.path),
        ]
        cmd += ["--data-size", str(self.data.size), "--stop-file", str(stop_file), "--elems", str(elems)]
        cmd += ["--gpus", str(GPUS), "--degrade-file", str(self.degrade_file)]
        env = {
            **os.environ,
            "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'client'}",
            "OMP_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": self.if_name,
            "TNA_CHECKPOINT_REQUEST_FILE": str(self.request_file),
            "TNA_STEP_REPORT": "1",
        }
        cgroup = self.cgroup
        with open(self.dir / "trainer.log", "ab") as log:
            self.trainer = subprocess.Popen(
                cmd,
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: cgroup.join(),
            )

    def trainer_log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.dir / "trainer.log").read_text(errors="replace")[-4000:]
        return ""

    def throttle(self, read_bps: int) -> None:
        assert self.cgroup is not None
        self.cgroup.set_read_bps(read_bps)

    def degrade(self, gpu: int | None, cause: str = "", factor: float = 1.0) -> None:
        """GPU ``gpu`` of this node runs ``factor`` times slow under ``cause`` (None: healthy again)."""
        if gpu is None:
            self.degrade_file.unlink(missing_ok=True)
        else:
            write_atomic(
                self.degrade_file, json.dumps({"gpu": gpu, "cause": cause, "factor": factor}).encode()
            )

    def cap_link(self, mbit: int | None) -> None:
        """tc tbf on both ends of this node's link (None: take it off)."""
        for prefix, dev in ((["ip", "netns", "exec", self.ns], self.if_name), ([], self.host_if)):
            sh(*prefix, "tc", "qdisc", "del", "dev", dev, "root", check=False)
            if mbit is not None:
                sh(*prefix, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
                   "burst", "32kb", "latency", "50ms")  # fmt: skip

    def down(self) -> None:
        for p in (self.trainer, self.agent):
            if p is None or p.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                if p is self.trainer:
                    os.killpg(p.pid, signal.SIGKILL)
                else:
                    p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.cgroup is not None:
            self.cgroup.remove()
        sh("ip", "netns", "del", self.ns, check=False)
        sh("ip", "link", "del", self.host_if, check=False)
        if self.data is not None:
            self.data.close()
        self.gpus.path.unlink(missing_ok=True)


class Fabric:
    """The bridge the nodes hang on; the host (Prometheus) is .1 on it."""

    def __init__(self, work: Path, count: int) -> None:
        pid = os.getpid()
        self.tag = str(pid % 100000)
        self.octet = 100 + pid % 100
        self.bridge = f"tnb{self.tag}"
        self.host_ip = f"198.18.{self.octet}.1"
        self.nodes = [Node(i, self.tag, self.octet, work) for i in range(count)]

    def up(self) -> Fabric:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for n in self.nodes:
            n.up(self.bridge)
        return self

    def down(self) -> None:
        for n in self.nodes:
            with contextlib.suppress(Exception):
                n.down()
        sh("ip", "link", "del", self.bridge, check=False)

    def targets(self, job_label: str | None) -> list[dict[str, Any]]:
        """What the fleet inventory writes; without a job tag the job comes from the trainers."""
        out = []
        for n in self.nodes:
            labels = {"__meta_ecs_instance_id": n.name}
            if job_label:
                labels["__meta_ecs_tag_training_job"] = job_label
            out.append({"targets": [f"{n.ip}:{n.port}"], "labels": labels})
        return out


def firing(prom: Any, alert: str) -> list[dict[str, str]]:
    return [r["metric"] for r in prom.query(f'ALERTS{{alertname="{alert}", alertstate="firing"}}')]


def message_text(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)
