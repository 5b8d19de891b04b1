"""The real daemon with every part switched on and something to show: fake GPUs (GPM, NVLink, ECC, an
Xid, a compute process), RDMA and NIC sysfs from real kernel fixtures, the metadata simulator with a
spot notice, the classifier, checkpointing and a webhook channel. The deploy tests read its /metrics
to learn which metric names the agent really exports, and scrape it with a real Prometheus."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conftest import KERNEL_FIXTURES, AgentProcess, free_port, need_binary

from agent.core.statefile import write_atomic
from agent.devtools.fake_nvml import FakeNvml, device, library_dir
from agent.devtools.simprocess import MetadataSimProcess

GIB = 1024**3


class LiveAgent:
    def __init__(self, agent: AgentProcess, sim: MetadataSimProcess, nvml: FakeNvml) -> None:
        self.agent = agent
        self.sim = sim
        self.nvml = nvml

    def metric(self, pattern: str) -> bool:
        return re.search(pattern, self.agent.metrics(), re.M) is not None

    def notice(self, seconds: float = 300) -> dict[str, Any]:
        """A spot termination notice in the simulator; returns once the agent exports it."""
        ev = self.sim.control("/notice", {"kind": "spot-termination", "seconds": seconds})
        self.agent.wait_for(
            lambda: self.metric(r'^training_node_preemption_notice\{kind="spot-termination"\} 1\.0$'),
            timeout=20,
            what="the spot notice in /metrics",
        )
        return ev


@contextmanager
def live_agent(tmp: Path) -> Iterator[LiveAgent]:
    need_binary("cc", "build-essential")  # the fake libnvidia-ml.so.1 is built from fakenvml/
    lib = library_dir()
    sysfs = KERNEL_FIXTURES / "procfs" / "sys"  # mlx4/mlx5/hfi1 RDMA ports, class/net speeds
    # a stand-in training process on GPU 0, so the process collector follows a real PID
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    sim = None
    agent = None
    try:
        nvml = FakeNvml(
            tmp / "nvml.json",
            gpus=[
                device(
                    0,
                    utilization_gpu=98,
                    sm_active=82.0,
                    tensor_active=61.0,
                    power_mw=610_000,
                    memory_used_bytes=71 * GIB,
                    processes=[{"pid": trainer.pid, "used_memory_bytes": 70 * GIB}],
                ),
                device(1, utilization_gpu=97, sm_active=80.0, power_mw=590_000, clocks_event_reasons=0x4),
                device(2),  # its NVML calls hang once it has been read: the unresponsive GPU's series
            ],
        )
        sim = MetadataSimProcess(tmp / "metadata-sim-alibaba.log", "alibaba")
        agent = AgentProcess(
            tmp,
            {
                "agent": {"sysfs": str(sysfs) if sysfs.is_dir() else "/sys"},
                "preemption": {
                    "provider": "alibaba",
                    "endpoint": sim.url,
                    "poll_interval": "200ms",
                    "maintenance_interval": "1s",
                },
                "trainer": {"discover": ["nvml"], "dry_run": True},
                # a priced ledger with a known interruption rate: every goodput and cost family shows
                "goodput": {"resolution": "1s", "window": "1m", "mtbi": "24h", "poll": "200ms"},
                "cost": {"currency": "CNY", "instance_hour_price": 36.0},
                # a verdict within seconds instead of minutes
                "classifier": {
                    "window": "2s",
                    "evaluate_every": "1s",
                    "confirmations": 1,
                    "warmup": "0s",
                    "sustain": "0s",
                },
                "alerts": {
                    # a receiver nobody listens on (loopback): the channel's families appear
                    "webhooks": [
                        {"name": "ops", "type": "webhook", "url": f"http://127.0.0.1:{free_port()}/hook"}
                    ]
                },
            },
            env={"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_STATE": str(nvml.path)},
        )
        agent.start()
        live = LiveAgent(agent, sim, nvml)
        agent.wait_for(
            lambda: live.metric(r'^training_node_gpu_sm_active_ratio\{gpu="1"'), what="fake GPUs in /metrics"
        )
        # the trainer reports a periodic checkpoint (what PreemptionGuard.saved() writes)
        saved = {"kind": "saved", "step": 100, "path": "/ckpt/100", "seconds": 12.5, "pid": trainer.pid}
        saved["time"] = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        reqdir = tmp / "run" / "checkpoint"
        reqdir.mkdir(parents=True, exist_ok=True)
        write_atomic(reqdir / f"saved-{trainer.pid}-1.json", json.dumps(saved).encode())
        agent.wait_for(
            lambda: live.metric(r"^training_node_checkpoint_advised_interval_seconds "), what="cadence advice"
        )
        # ... and its steps (what guard.step() hands over every [trainer] step_report)
        period = {"count": 10, "sum": 5.0, "p50": 0.5, "p90": 0.52, "p99": 0.6, "max": 0.61}
        steps = {"kind": "steps", "pid": trainer.pid, "rank": 0, "local_rank": 0, "world_size": 2}
        steps |= {"job": "llama", "count": 1200, "sum": 600.0, "period": period, "time": saved["time"]}
        write_atomic(reqdir / f"steps-{trainer.pid}.json", json.dumps(steps).encode())
        agent.wait_for(lambda: live.metric(r"^training_node_train_steps_total\{"), what="step figures")
        nvml.set(2, delay_ms=600_000)
        agent.wait_for(
            lambda: live.metric(r'^training_node_gpu_unresponsive_seconds\{gpu="2"'), what="the hung GPU"
        )
        nvml.add_xid(1, 79)
        agent.wait_for(
            lambda: live.metric(r'^training_node_gpu_xid_errors_total\{.*xid="79"'), what="the Xid"
        )
        yield live
    finally:
        if agent is not None:
            agent.stop()
            if getattr(agent, "_log", None):
                agent._log.close()
        if sim is not None:
            sim.stop()
        trainer.kill()
        trainer.wait()


_NAME_LINE = re.compile(r"^(?:# (?:HELP|TYPE) )?([a-zA-Z_:][a-zA-Z0-9_:]*)")


def exposition_names(text: str) -> set[str]:
    """Every metric name in an exposition: sample names (``_bucket``, ``_total``, ``_info`` ...) and the
    names of families declared without samples (HELP/TYPE lines)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# ") and not line.startswith(("# HELP ", "# TYPE ")):
            continue
        m = _NAME_LINE.match(line)
        if m:
            names.add(m.group(1))
    return names
