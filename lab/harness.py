"""Runs lab scenarios: prepares the data file, the throttled one-core cgroup, the shaped peer network
and the fake GPUs; starts the synthetic trainer for each scenario; collects the agent's evaluations
and scores them (``lab.scoring``).

The agent itself is started by the caller (the lab tests use the real daemon as a subprocess) with
``Lab.agent_config()`` and ``Lab.agent_env()``; ``history`` fetches its evaluations and ``drill``
asks it for a checkpoint drill, both over its control socket.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.config.types import parse_duration
from lab.blockdev import DataSource, make_data
from lab.cgroups import TrainerCgroup
from lab.gpu import LabGpus, default_state_path
from lab.netns import REPO, PeerNetwork
from lab.scoring import Result, score, segments_from_log

READ_BPS = 8 << 20  # the cgroup's read throttle: 8 MiB/s, a slow NAS share in miniature
LAB_CONFIG: dict[str, dict[str, Any]] = {
    "agent": {"interval": "100ms"},
    "classifier": {
        "window": "1.2s",
        "evaluate_every": "1s",
        "confirmations": 2,
        "warmup": "2s",  # a data-loader pipeline settles after its first prefetched batches
        "min_window_fill": 0.3,
        "sustain": "3s",
        "history": 5000,
    },
}


@dataclass(frozen=True)
class Scenario:
    name: str
    schedule: tuple[tuple[str, float], ...]  # (regime, seconds); empty: no job (idle)
    idle_seconds: float = 0.0
    drills_at: tuple[float, ...] = ()  # seconds after the trainer starts


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("compute", (("compute", 12),)),
        Scenario("data/storage", (("storage", 12),)),
        Scenario("data/cpu", (("cpu", 12),)),
        Scenario("network", (("network", 12),)),
        Scenario("sync-wait", (("sync-wait", 12),)),
        Scenario("idle", (), idle_seconds=9),
        Scenario("regime change", (("compute", 8), ("storage", 8), ("network", 8), ("compute", 8))),
        Scenario("checkpoints", (("checkpoint", 20),), drills_at=(8.0,)),
    )
}


class Lab:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.data: DataSource | None = None
        self.cgroup: TrainerCgroup | None = None
        self.net: PeerNetwork | None = None
        self.gpus: LabGpus | None = None
        self.results: list[Result] = []
        self.last_verdict: str | None = None
        self.runtime_dir: Path | None = None

    # --- environment -------------------------------------------------------------------------------

    def setup(self, peer_seconds: float = 900) -> Lab:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "checkpoints").mkdir(exist_ok=True)
        self.gpus = LabGpus(default_state_path(self.workdir))
        self.data = make_data(self.workdir)
        cpus = "1" if (os.cpu_count() or 1) > 1 else "0"
        self.cgroup = TrainerCgroup(f"tna-lab-{os.getpid()}", self.data.device, READ_BPS, cpus).create()
        self.net = PeerNetwork().up()
        self.net.start_peer(peer_seconds)
        return self

    def teardown(self) -> None:
        if self.net:
            self.net.down()
        if self.cgroup:
            self.cgroup.remove()
        if self.data:
            self.data.close()
        if self.gpus:
            self.gpus.path.unlink(missing_ok=True)

    def agent_config(self, runtime_dir: Path) -> dict[str, dict[str, Any]]:
        """What the lab's agent needs beyond its defaults: short windows, and the shaped link's real
        capacity (the veth reports 10 Gb/s; tc holds it to ``rate_mbit``), as an operator would set
        it for a rate-limited link."""
        assert self.net is not None
        self.runtime_dir = runtime_dir
        cfg = {k: dict(v) for k, v in LAB_CONFIG.items()}
        cfg["classifier"]["nic_capacity"] = {self.net.host_if: self.net.rate_bytes}
        return cfg

    def agent_env(self) -> dict[str, str]:
        from agent.devtools.fake_nvml import library_dir

        assert self.gpus is not None
        return {"LD_LIBRARY_PATH": str(library_dir()), "FAKE_NVML_STATE": str(self.gpus.path)}

    def describe(self) -> list[str]:
        assert self.data and self.cgroup and self.net
        return [
            f"data: {self.data.path} on {self.data.disk_name} ({self.data.device}), read with O_DIRECT",
            *(f"cgroup: {h}" for h in self.cgroup.how),
            f"network: {self.net.host_if} <-> {self.net.ns}/{self.net.peer_if}, "
            f"{self.net.host_ip} <-> {self.net.peer_ip}, tc tbf {self.net.rate_mbit} mbit each way",
        ]

    # --- scenarios ---------------------------------------------------------------------------------

    def run(
        self,
        sc: Scenario,
        history: Callable[[], list[dict[str, Any]]],
        drill: Callable[[], Any] | None = None,
    ) -> Result:
        assert self.gpus and self.cgroup and self.net and self.data
        start = time.time()
        regimes: list[tuple[float, str]] = []
        phases: list[tuple[float, str]] = []
        if not sc.schedule:
            self.gpus.phase("idle", None)
            time.sleep(sc.idle_seconds)
        else:
            log = self.workdir / f"trainer-{len(self.results)}.jsonl"
            proc = self._trainer(sc, log)
            threads = [
                threading.Thread(target=self._drill_at, args=(at, proc, drill), daemon=True)
                for at in sc.drills_at
                if drill
            ]
            for t in threads:
                t.start()
            total = sum(s for _, s in sc.schedule)
            try:
                rc = proc.wait(total + 60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            if rc != 0:
                raise RuntimeError(
                    f"the synthetic trainer failed ({rc}):\n{(log.with_suffix('.err')).read_text()}"
                )
            for t in threads:
                t.join(30)
            lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
            regimes, phases = segments_from_log(lines)
        # the job ends with the trainer's last phase change (to idle); an idle run, now
        end = max(at for at, _ in phases) if phases else time.time()
        time.sleep(1.2)  # let the last evaluation of the run land
        res = score(
            sc.name,
            history(),
            regimes,
            phases,
            start,
            end,
            window=parse_duration(LAB_CONFIG["classifier"]["window"]),
            warmup=parse_duration(LAB_CONFIG["classifier"]["warmup"]),
            before=self.last_verdict,
        )
        self.last_verdict = res.changes[-1].after if res.changes else None
        self.results.append(res)
        return res

    def _trainer(self, sc: Scenario, log: Path) -> subprocess.Popen[bytes]:
        assert self.gpus and self.cgroup and self.net and self.data and self.runtime_dir
        schedule = ",".join(f"{r}:{s:g}" for r, s in sc.schedule)
        cmd = [
            sys.executable,
            "-m",
            "lab.trainer",
            "--schedule",
            schedule,
            "--gpu-state",
            str(self.gpus.path),
            "--log",
            str(log),
            "--data",
            str(self.data.path),
            "--data-size",
            str(self.data.size),
            "--peer",
            f"{self.net.peer_ip}:{self.net.port}",
            "--checkpoint-dir",
            str(self.workdir / "checkpoints"),
        ]
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "TNA_CHECKPOINT_REQUEST_FILE": str(self.runtime_dir / "checkpoint" / "request.json"),
        }
        err = open(log.with_suffix(".err"), "wb")  # noqa: SIM115 - handed to the child
        try:
            return subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=err, stderr=err, preexec_fn=self.cgroup.join
            )
        finally:
            err.close()

    def _drill_at(self, at: float, proc: subprocess.Popen[bytes], drill: Callable[[], Any] | None) -> None:
        deadline = time.monotonic() + at
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return
            time.sleep(0.05)
        if drill is not None:
            drill()
