"""Runs lab scenarios: prepares the data file, the throttled cgroup, a shaped peer link per scenario
that needs one and the fake GPUs; starts the synthetic trainer (or a real PyTorch job, ``lab.torchlab``)
for each scenario, with its background noise; collects the agent's evaluations and scores them
(``lab.scoring``).

The agent itself is started by the caller (the lab tests use the real daemon as a subprocess) with
``Lab.agent_config()`` and ``Lab.agent_env()``; ``history`` fetches its evaluations and ``drill``
asks it for a checkpoint drill, both over its control socket. The agent is told no capacity: the
shaped link reports 10 Gb/s and is held to a few tens of Mbit/s, as a cloud instance's cap would.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.config.classifier import ClassifierSection
from lab.blockdev import DataSource, make_data
from lab.cgroups import TrainerCgroup
from lab.draws import HELD_OUT_SEEDS, TUNE_SEEDS, Draw, gpu_readings
from lab.gpu import READINGS_ENV, WORK_ENV, LabGpus, default_state_path
from lab.netns import REPO, PeerNetwork
from lab.scoring import Result, score, segments_from_log

_LABS = itertools.count()  # the labs of this process: each has its own cgroup and fake GPUs
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
# an agent at its default settings (1 s samples, 60 s window, 5 s evaluations, 20 s warm-up): only
# the history is longer, to score a whole module's runs
DEFAULT_CONFIG: dict[str, dict[str, Any]] = {"agent": {"interval": "1s"}, "classifier": {"history": 5000}}
NETWORK_REGIMES = {"network", "sync-wait"}
READINGS_SEED_ENV = "TNA_LAB_READINGS_SEED"
STREAM_REGIMES = {"network-input"}  # input streamed from lab.objserver behind the shaped link


@dataclass(frozen=True)
class Scenario:
    name: str
    schedule: tuple[tuple[str, float], ...]  # (regime, seconds); empty: no job (idle)
    idle_seconds: float = 0.0
    drills_at: tuple[float, ...] = ()  # seconds after the trainer starts
    args: dict[str, Any] = field(default_factory=dict)  # lab.trainer (or torch job) options
    cpuset: int | None = None  # confine the job to this many cores; None: no cpuset
    link_mbit: int = 80  # the peer link's tc rate, where the job uses the network
    read_bps: int = READ_BPS
    write_bps: int = 0  # the job's writes to the dataset's disk at most this (0: unthrottled)
    noise: str | None = None  # "disk" | "cpu": background load beside the job
    family: str = ""  # for the time-to-first-verdict table; the name by default
    torch: str | None = None  # a real PyTorch job (lab.torchlab.JOBS) instead of the synthetic trainer
    defaults: bool = False  # for an agent at its default settings (lab.torchlab), not LAB_CONFIG's
    # regime -> the verdict it must get here where not lab.scoring.TRUTH's: a compute job whose
    # second cause is the regime (lab.seconddraws)
    truth: dict[str, str] | None = None
    # seconds from the job's start within which the shape's own bar asks it named, where that is
    # longer than the scorer's allowance of evaluations (a save every 10-20 s: 60 s)
    named_within: float = 0.0
    # whether its verdicts enter make lab's one matrix (EVERY_RUN): not where the lab does what no node
    # does (the advice's lab turns the same agent's GPUs into another card between two runs)
    in_matrix: bool = True

    @property
    def regimes(self) -> set[str]:
        return {r for r, _ in self.schedule}


def from_draw(d: Draw) -> Scenario:
    return Scenario(
        d.name,
        ((d.regime, d.seconds),),
        args=dict(d.args),
        cpuset=d.cpuset,
        link_mbit=d.link_mbit or 80,
        read_bps=d.read_bps or READ_BPS,
        noise=d.noise,
        family=d.family,
    )


# every run of every lab in this process: make lab's one confusion matrix of old and new shapes
# together (tests/conftest.py writes it at the session's end)
EVERY_RUN: list[Result] = []

# the lab's fixed scenarios: no job, a regime change within one run, and checkpoints (with a drill);
# the single regimes are drawn at random instead (lab.draws), and both the classifier's lab and the
# goodput ledger's score every run
SCENARIOS = {
    s.name: s
    for s in (
        Scenario("idle", (), idle_seconds=9),
        Scenario("regime change", (("compute", 8), ("storage", 8), ("network", 8), ("compute", 8))),
        Scenario("checkpoints", (("checkpoint", 20),), drills_at=(8.0,)),
    )
}


# issue 23: 4 MiB each way a step over a 50 Mbit/s veth that reports 10 Gb/s, the GPUs spinning for
# ~0.7 s of it and computing for 0.25 s (every 1 s sample holds both), one core busy beside it (as
# `stress-ng --cpu 1`): for an agent at its defaults, whose verdict must hold run after run
CAPPED_LINK = Scenario(
    "capped link 4 MiB, 50 Mbit/s, a busy core beside",
    (("network", 42),),
    args={"grad-bytes": 4 << 20, "compute-step": 0.25},
    link_mbit=50,
    noise="cpu",
    family="capped link",
    defaults=True,
)


def readings_seed() -> int:
    """The seed of this run's GPU readings (``lab.draws.gpu_readings``): TNA_LAB_READINGS_SEED, else
    the first seed of the set the run draws from, so tuning and held-out runs see GPUs of their own."""
    given = os.environ.get(READINGS_SEED_ENV)
    if given:
        return int(given)
    return (TUNE_SEEDS if os.environ.get("TNA_LAB_SEEDS") == "tune" else HELD_OUT_SEEDS)[0]


class Lab:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.readings_seed = readings_seed()
        self.readings = gpu_readings(self.readings_seed)  # every writer of the run's GPUs shows these
        self.data: DataSource | None = None
        self.cgroup: TrainerCgroup | None = None
        self.net: PeerNetwork | None = None  # the current scenario's link
        self.gpus: LabGpus | None = None
        self.results: list[Result] = []
        self.last_verdict: str | None = None
        self.runtime_dir: Path | None = None
        self.links: list[str] = []
        self.runs = 0  # every run, failed ones too: a failed job's log must not become the next one's
        self.code_warm = False  # the PyTorch jobs' code is in the page cache (lab.torchlab.warm_code)
        self.classifier = ClassifierSection(**LAB_CONFIG["classifier"])  # what the agent runs on
        self.gpu_work: dict[str, Any] = {}  # the jobs' GPUs show these while computing (lab.gpu.WORK_ENV)

    # --- environment -------------------------------------------------------------------------------

    def setup(self) -> Lab:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "checkpoints").mkdir(exist_ok=True)
        # two labs may live at once in one process (the suite's shared lab beside one at the agent's
        # defaults): the one torn down first must not take the other's cgroup or GPUs with it
        tag = f"{os.getpid()}-{next(_LABS)}"
        self.gpus = LabGpus(default_state_path(self.workdir, tag), readings=self.readings)
        self.data = make_data(self.workdir)
        self.cgroup = TrainerCgroup(f"classifier-lab-{tag}", self.data.device, READ_BPS).create()
        return self

    def teardown(self) -> None:
        self._link_down()
        if self.cgroup:
            self.cgroup.remove()
        if self.data:
            self.data.close()
        if self.gpus:
            self.gpus.path.unlink(missing_ok=True)

    def agent_config(
        self, runtime_dir: Path, override: dict[str, dict[str, Any]] | None = None
    ) -> dict[str, dict[str, Any]]:
        """What the lab's agent needs beyond its defaults: short windows (``override`` replaces a
        section whole: ``DEFAULT_CONFIG`` for an agent at its defaults). No capacities."""
        self.runtime_dir = runtime_dir
        cfg = {k: dict(v) for k, v in LAB_CONFIG.items()}
        cfg.update(override or {})
        self.classifier = ClassifierSection(**cfg.get("classifier", {}))
        return cfg

    def agent_env(self) -> dict[str, str]:
        from agent.devtools.fake_nvml import library_dir

        assert self.gpus is not None
        return {"LD_LIBRARY_PATH": str(library_dir()), "FAKE_NVML_STATE": str(self.gpus.path)}

    def describe(self) -> list[str]:
        assert self.data and self.cgroup
        return [
            f"data: {self.data.path} on {self.data.disk_name} ({self.data.device}), read with O_DIRECT",
            *(f"cgroup: {h}" for h in self.cgroup.how),
            "network: a fresh veth pair per scenario into a namespace on 198.19.x, tc tbf each way; "
            "the veth reports 10 Gb/s and the agent is told no capacity",
            f"GPU readings (seed {self.readings_seed}): "
            + "; ".join(
                f"GPU {i} utilization over {r['utilization_average_seconds']:g} s, "
                f"buffer {r['sample_buffer_depth']} samples on {r['sample_clock']}"
                for i, r in enumerate(self.readings)
            ),
            *self.links,
        ]

    def _link_up(self, mbit: int, server: str | None) -> PeerNetwork:
        self._link_down()
        self.net = PeerNetwork(rate_mbit=mbit).up()
        if server is not None:
            self.net.start_peer(240, server)
        self.links.append(
            f"  {self.net.host_if} <-> {self.net.ns}/{self.net.peer_if}: tc tbf {mbit} mbit"
            + (f", {server} in the namespace" if server else "")
        )
        return self.net

    def _link_down(self) -> None:
        if self.net:
            self.net.down()
            self.net = None

    # --- scenarios ---------------------------------------------------------------------------------

    def run(
        self,
        sc: Scenario,
        history: Callable[[], list[dict[str, Any]]],
        drill: Callable[[], Any] | None = None,
        probe: Callable[[], Any] | None = None,
    ) -> Result:
        """``probe`` is called once, 80% of the way through the job (to read the agent's status while
        the job runs)."""
        assert self.gpus and self.cgroup and self.data
        start = time.time()
        regimes: list[tuple[float, str]] = []
        phases: list[tuple[float, str]] = []
        if not sc.schedule:
            self.gpus.phase("idle", None)
            time.sleep(sc.idle_seconds)
        else:
            self.cgroup.set_read_bps(sc.read_bps)
            self.cgroup.set_write_bps(sc.write_bps)
            if sc.cpuset is not None:
                self.cgroup.set_cpus(sc.cpuset)
            if sc.regimes & STREAM_REGIMES:
                self._link_up(sc.link_mbit, server="lab.objserver")
            elif sc.regimes & NETWORK_REGIMES:
                # torchrun's ranks talk to each other: no peer process of the lab's own
                self._link_up(sc.link_mbit, server=None if sc.torch else "lab.peer")
            self.runs += 1
            log = self.workdir / f"trainer-{self.runs}.jsonl"
            total = sum(s for _, s in sc.schedule)
            noise = self._noise(sc.noise, total + 30)
            if probe is not None:
                # late in a job for an agent at its defaults: its first verdict may take 30 s
                at = (0.95 if sc.defaults else 0.8) * total
                threading.Thread(target=self._probe_at, args=(log, at, probe), daemon=True).start()
            try:
                self._run_job(sc, log, total, drill)
            finally:
                if noise is not None and noise.poll() is None:
                    noise.terminate()
                    noise.wait(10)
                self._link_down()
            lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
            regimes, phases = segments_from_log(lines)
        # the job ends with the trainer's last phase change (to idle); an idle run, now
        end = max(at for at, _ in phases) if phases else time.time()
        time.sleep(self.classifier.evaluate_every + 0.2)  # let the last evaluation of the run land
        res = score(
            sc.name,
            history(),
            regimes,
            phases,
            start,
            end,
            window=self.classifier.window,
            warmup=self.classifier.warmup,
            before=self.last_verdict,
            family=sc.family or sc.name,
            truth=sc.truth,
            allowance_seconds=sc.named_within,
        )
        self.last_verdict = res.changes[-1].after if res.changes else None
        self.results.append(res)
        if sc.in_matrix:
            EVERY_RUN.append(res)
        return res

    def _run_job(self, sc: Scenario, log: Path, total: float, drill: Callable[[], Any] | None) -> None:
        if sc.torch is not None:
            from lab.torchlab import run_job

            assert self.gpus and self.cgroup and self.data
            run_job(sc, self, log)
            return
        proc = self._trainer(sc, log)
        threads = [
            threading.Thread(target=self._drill_at, args=(at, proc, drill), daemon=True)
            for at in sc.drills_at
            if drill
        ]
        for t in threads:
            t.start()
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

    def _noise(self, kind: str | None, seconds: float) -> subprocess.Popen[bytes] | None:
        """A neighbour outside the job's cgroup: not its process tree, not its throttle."""
        if kind is None:
            return None
        assert self.data is not None
        cmd = [sys.executable, "-m", "lab.noise", "--kind", kind, "--seconds", str(seconds)]
        if kind == "disk":
            cmd += ["--path", str(self.data.path)]
        return subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})

    def trainer_env(self) -> dict[str, str]:
        assert self.runtime_dir is not None
        return {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "TNA_CHECKPOINT_REQUEST_FILE": str(self.runtime_dir / "checkpoint" / "request.json"),
            READINGS_ENV: json.dumps(self.readings),
            **({WORK_ENV: json.dumps(self.gpu_work)} if self.gpu_work else {}),
        }

    def _trainer(self, sc: Scenario, log: Path) -> subprocess.Popen[bytes]:
        assert self.gpus and self.cgroup and self.data
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
            "--checkpoint-dir",
            str(self.workdir / "checkpoints"),
        ]
        if self.net is not None:
            cmd += ["--peer", f"{self.net.peer_ip}:{self.net.port}", "--link-mbit", str(self.net.rate_mbit)]
        for k, v in sc.args.items():
            cmd += [f"--{k}", str(v)]
        err = open(log.with_suffix(".err"), "wb")  # noqa: SIM115 - handed to the child
        cgroup, cpuset = self.cgroup, sc.cpuset is not None
        env = self.trainer_env()
        if sc.regimes & NETWORK_REGIMES:
            # one rank of a job of two, its peer the lab's: launched as a launcher would, with its rank
            # count (a single process has no collective to wait in, and its spin is host/launch)
            env["WORLD_SIZE"] = "2"
        try:
            return subprocess.Popen(
                cmd,
                cwd=REPO,
                env=env,
                stdout=err,
                stderr=err,
                preexec_fn=lambda: cgroup.join(cpuset=cpuset),
            )
        finally:
            err.close()

    @staticmethod
    def _probe_at(log: Path, after: float, probe: Callable[[], Any]) -> None:
        """``after`` seconds from the job's first regime line (a PyTorch job imports for seconds)."""
        deadline = time.monotonic() + after + 120
        while time.monotonic() < deadline:
            if log.exists() and '"seconds"' in log.read_text():
                time.sleep(after)
                probe()
                return
            time.sleep(0.1)

    def _drill_at(self, at: float, proc: subprocess.Popen[bytes], drill: Callable[[], Any] | None) -> None:
        deadline = time.monotonic() + at
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return
            time.sleep(0.05)
        if drill is not None:
            drill()
