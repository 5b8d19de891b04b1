"""Synthetic snapshot sequences for the classifier's unit tests.

A *regime* is a cycle of GPU phases (``work``, ``spin``, ``starved``) plus what the node's pipeline
does meanwhile; :func:`run` turns regimes into NodeSnapshots one second apart (rates filled in
directly, as the sampler would) and feeds them to an :class:`Engine`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from agent.classifier.engine import Engine, Evaluation
from agent.config.classifier import ClassifierSection
from agent.snapshot import NodeSnapshot
from agent.snapshot.rates import NodeRates
from agent.sources.gpu.part import GpuPart, GpuProcess, GpuStats
from agent.sources.gpu.rates import GpuRates
from agent.sources.host.part import CpuTimes, HostPart
from agent.sources.host.rates import HostRates
from agent.sources.network.part import NetworkPart, NicStat, RdmaPort
from agent.sources.network.rates import NetworkRates
from agent.sources.processes.part import ProcessPart, ProcessStat
from agent.sources.processes.rates import ProcessRates
from agent.sources.storage.part import StoragePart
from agent.sources.storage.rates import StorageRates

LIMIT = 400.0
IDLE = 60.0
# utilization, power, SM activity
PHASES = {
    "work": (0.97, 330.0, 0.8),
    "spin": (1.0, 85.0, 0.04),  # NCCL waiting: busy by utilization, near-idle power and SMs
    "starved": (0.0, 62.0, 0.0),
    # small kernels launched one after another by a host that cannot go faster: busy by utilization,
    # a little work in each (HTA's kernel wait; DCGM's graphics active with SM active low)
    "small": (0.72, 140.0, 0.08),
}
# phases a 1 s sample holds two of (not drawn by bench/classifier_digest.py, whose streams stay as
# they were): "half", computing half of it and spinning in the exchange for the rest
MIXED_PHASES = {"half": (0.985, 207.5, 0.42)}
BASE_WALL = 1_700_000_000.0


@dataclass
class Regime:
    phases: tuple[str, ...]  # cycled, one per sample
    seconds: int = 30
    gpm: bool = True  # GPUs report SM activity; False = power only
    gpus: int = 2
    trainer: bool = True
    pid: int = 4242
    cores: float = 0.3  # trainer tree CPU in cores
    allowed: float = 4.0
    disk_read: float = 0.0  # bytes/s on "vda" while starved
    disk_busy: float = 0.0
    nfs_read: float = 0.0  # bytes/s on /mnt/data while starved
    nfs_rtt: float | None = None  # seconds, while starved
    nfs_rtt_idle: float = 0.004  # seconds, otherwise
    iowait: float = 0.0  # while starved
    psi_io: float = 0.0
    nic: float = 0.0  # bytes/s on eth0 while the GPUs wait (spin or starved)
    nic_other: float = 0.0  # bytes/s on eth0 otherwise
    nic_speed: int | None = None
    cnp: float = 0.0  # CNP/s on mlx5_0/1 while waiting
    rdma: float = 0.0
    trainer_read: float | None = None  # bytes/s the trainer's tree reads (None: not measured)
    blocked: bool = False  # the trainer's tree is in uninterruptible sleep while the GPUs starve
    trainer_write: float = 0.0  # bytes/s its tree writes meanwhile
    workers: int = 3  # data-loader workers under the trainer
    busy: tuple[float, ...] = ()  # cores each process of the tree ran or waited to run (schedstat)
    busy_work: tuple[float, ...] | None = None  # ... in the samples where the GPUs work (None: busy)
    host_busy: float = 0.2  # the host's CPU busy share (8 CPUs)
    nic_bursts: int = 0  # >0: traffic only in every n-th waiting sample, at n times the rate
    # the rate of each sample times these, cycled: an exchange the samples cut at random places
    nic_cycle: tuple[float, ...] = ()
    slow: tuple[int, ...] = ()  # GPUs that work while the others spin (the ones they wait for)
    slow_throttle: int = 0  # the clocks event reasons those GPUs run under
    slow_clock: float = 1.98e9  # their SM clock, Hz (the others run at the max, 1980 MHz)
    world_size: int | None = None  # the trainer's launcher rank count (None: its environment unread)
    write_starved: float = 0.0  # bytes/s its tree writes while the GPUs starve (a synchronous save)
    pcie_starved: float = 0.0  # bytes/s each GPU receives over PCIe while starved (host-to-device copies)
    pcie_other: float = 0.0  # ... otherwise
    pipe_write: float = 0.0  # of its writes, bytes/s into pipes and sockets (wchar, not write_bytes)
    # what tna_client in the trainer says of each sample, cycled with ``phases``: "" (nothing),
    # "checkpoint" or "evaluation" (inside such a span), "data" (waiting for its next batch);
    # None: no trainer tells its spans
    told: tuple[str, ...] | None = None


def gpu_stats(
    i: int, phase: str, gpm: bool, pid: int | None, throttle: int = 0, xids=None, clock: float = 1.98e9
) -> GpuStats:
    util, power, sm = PHASES[phase] if phase in PHASES else MIXED_PHASES[phase]
    return GpuStats(
        index=i,
        uuid=f"GPU-{i:04d}",
        model="NVIDIA H800",
        up=True,
        utilization=util,
        power_watts=power,
        power_limit_watts=LIMIT,
        sm_active=sm if gpm else None,
        clocks_event_reasons=throttle,
        processes=(GpuProcess(pid, 1 << 30),) if pid else (),
        xid_counts=dict(xids or {}),
        sm_clock_hertz=clock,
        sm_clock_max_hertz=1.98e9,
    )


def _gpu(i: int, r: Regime, phase: str, pid: int | None) -> GpuStats:
    if i in r.slow:  # works through the others' spin: the collective waits for it
        work = "work" if phase == "spin" else phase
        return gpu_stats(i, work, r.gpm, pid, throttle=r.slow_throttle, clock=r.slow_clock)
    return gpu_stats(i, phase, r.gpm, pid)


def snapshot(seq: int, t: float, r: Regime, phase: str) -> NodeSnapshot:
    waiting = phase != "work"
    starved = phase == "starved"
    pid = r.pid if r.trainer else None
    gpu = GpuPart("550.54", "12.550", tuple(_gpu(i, r, phase, pid) for i in range(r.gpus)))
    procs = ProcessPart((stat_of(r, t, starved),) if r.trainer else ())
    nic_rate = r.nic if waiting else r.nic_other
    if r.nic_bursts and waiting:
        nic_rate = r.nic * r.nic_bursts if seq % r.nic_bursts == 0 else 0.0
    if r.nic_cycle:
        nic_rate *= r.nic_cycle[seq % len(r.nic_cycle)]
    rates = NodeRates.of_rates(
        HostRates(
            cpu_busy_ratio=r.host_busy,
            cpu_iowait_ratio=r.iowait if starved else 0.0,
            pressure_some_ratio={"io": r.psi_io if starved else 0.0},
        ),
        StorageRates(
            disk_read={"vda": r.disk_read if starved else 0.0},
            disk_busy_ratio={"vda": r.disk_busy if starved else 0.0},
            nfs_read={"/mnt/data": r.nfs_read if starved else 0.0},
            nfs_read_ops={"/mnt/data": 100.0},
            nfs_read_rtt_seconds={"/mnt/data": r.nfs_rtt if (starved and r.nfs_rtt) else r.nfs_rtt_idle},
        ),
        NetworkRates(
            nic_rx={"eth0": nic_rate * 0.9},
            nic_tx={"eth0": nic_rate},
            rdma_rx={("mlx5_0", 1): r.rdma if waiting else 0.0},
            rdma_tx={("mlx5_0", 1): r.rdma if waiting else 0.0},
            rdma_cnp={("mlx5_0", 1): r.cnp if waiting else 0.0},
        ),
        ProcessRates(
            process_cpu_cores={r.pid: r.cores} if r.trainer else {},
            process_member_busy=_member_busy(r, waiting),
            process_read={r.pid: r.trainer_read} if r.trainer and r.trainer_read is not None else {},
            process_write={r.pid: r.trainer_write + (r.write_starved if starved else 0.0)}
            if r.trainer
            else {},
            **_storage_write(r, starved),
        ),
        GpuRates(gpu_pcie_rx=dict.fromkeys(range(r.gpus), r.pcie_starved if starved else r.pcie_other)),
        *_told(r, seq, t),
        interval_seconds=1.0,
    )
    return NodeSnapshot(
        seq=seq,
        timestamp=BASE_WALL + t,
        monotonic=t,
        host=HostPart(CpuTimes(0, 0, 0, 0, 0, 0, 0, 0), 8, 1.0, 1.0, 1.0, 1 << 35, 1 << 34),
        gpu=gpu,
        storage=StoragePart((), ()),
        network=NetworkPart(
            (NicStat("eth0", 0, 0, 0, 0, 0, 0, 0, 0, r.nic_speed),),
            (RdmaPort("mlx5_0", 1, 0, 0, 25_000_000_000),),
        ),
        processes=procs,
        rates=rates,
    )


def _told(r: Regime, seq: int, t: float) -> tuple:
    """The trainer source's rates for this sample (imported here: bench/classifier_digest.py runs
    classifiers older than it on the same streams)."""
    if r.told is None:
        return ()
    from agent.sources.trainer.rates import TrainerRates

    said = r.told[seq % len(r.told)]
    waited = sum(1 for i in range(seq + 1) if r.told[i % len(r.told)] == "data")  # 1 s samples
    return (
        TrainerRates(
            saving=float(said == "checkpoint"),
            evaluating=float(said == "evaluation"),
            data_seconds=float(waited),
            data_at=BASE_WALL + t,
            reporting=1,
        ),
    )


def stat_of(r: Regime, t: float, starved: bool) -> ProcessStat:
    blocked = int(r.blocked and starved)
    cpu = t * r.cores
    # fields a tree before issue 48 lacks are set only where a regime uses them, so that
    # bench/classifier_digest.py can run an older classifier on the same streams
    since_48 = {"world_size": r.world_size} if r.world_size is not None else {}
    return ProcessStat(
        r.pid, 1000, "python", cpu, None, None, r.allowed, 8, r.workers, blocked=blocked, **since_48
    )


def _storage_write(r: Regime, starved: bool) -> dict[str, dict[int, float]]:
    """A save reaches storage (write_bytes); a pool's pipes and sockets count in wchar only."""
    if not r.trainer or not (r.trainer_write or r.write_starved):
        return {}
    wrote = r.trainer_write + (r.write_starved if starved else 0.0) - r.pipe_write
    return {"process_storage_write": {r.pid: wrote}}


def _member_busy(r: Regime, waiting: bool) -> dict[int, tuple[float, ...]]:
    busy = r.busy if waiting or r.busy_work is None else r.busy_work
    return {r.pid: busy} if r.trainer and busy else {}


def fast_cfg(**kw) -> ClassifierSection:
    """Short windows so a test's sequence is a few dozen samples: window 10s, evaluated every 2s."""
    base = dict(window="10s", evaluate_every="2s", warmup="0s", sustain="0s", confirmations=3)
    base.update(kw)
    return ClassifierSection(**base)


@dataclass
class Run:
    engine: Engine
    evaluations: list[Evaluation] = field(default_factory=list)
    t: float = 0.0
    seq: int = 0

    def feed(self, regimes: Iterable[Regime], hook: Callable[[float], None] | None = None) -> Run:
        for r in regimes:
            for k in range(r.seconds):
                self.t += 1.0
                self.seq += 1
                if hook:
                    hook(self.t)
                ev = self.engine.add_snapshot(snapshot(self.seq, self.t, r, r.phases[k % len(r.phases)]))
                if ev is not None:
                    self.evaluations.append(ev)
        return self

    @property
    def verdict(self) -> str | None:
        cur = self.engine.current
        return cur.label if cur else None

    def verdicts(self) -> list[str | None]:
        return [e.current.label if e.current else None for e in self.evaluations]


def run(*regimes: Regime, cfg: ClassifierSection | None = None, engine: Engine | None = None) -> Run:
    return Run(engine or Engine(cfg or fast_cfg())).feed(regimes)


# ready-made regimes
COMPUTE = Regime(("work",))
STORAGE = Regime(("starved", "starved", "work"), disk_read=200e6, iowait=0.3, psi_io=0.7)
CPU = Regime(("starved", "starved", "work"), cores=3.9, allowed=4.0)
NETWORK = Regime(("spin", "spin", "work"), nic=2.9e9, nic_other=1e6, nic_speed=3_125_000_000)
SYNC = Regime(("spin", "spin", "spin", "work"), nic=300e3, nic_other=100e3, nic_speed=3_125_000_000)
IDLE = Regime(("starved",), trainer=False)


def like(r: Regime, **kw) -> Regime:
    return replace(r, **kw)


def random_regimes(rnd: random.Random, n: int) -> list[Regime]:
    """``n`` of the ready-made regimes, each with randomized parameters: length, GPU count and GPM,
    trainer CPU and workers, pegged processes, reads, NIC rate and reported speed, bursts, new jobs."""
    out = []
    for _ in range(n):
        base = rnd.choice((COMPUTE, STORAGE, CPU, NETWORK, SYNC, IDLE))
        out.append(
            like(
                base,
                seconds=rnd.randint(8, 60),
                gpm=rnd.random() < 0.6,
                gpus=rnd.choice([1, 2, 4, 8]),
                cores=rnd.uniform(0.1, 4.0),
                disk_read=base.disk_read * rnd.uniform(0.2, 2),
                nic=base.nic * rnd.uniform(0.01, 2),
                nic_speed=rnd.choice([None, 3_125_000_000, 1_250_000_000]),
                busy=tuple(sorted((rnd.uniform(0, 1.05) for _ in range(rnd.randint(0, 5))), reverse=True)),
                workers=rnd.randint(0, 6),
                trainer_read=rnd.choice([None, 1e6, 1e8]),
                pid=rnd.choice([4242, 4243]),  # sometimes a new job
                nic_bursts=rnd.choice([0, 0, 3]),
            )
        )
    return out
