"""Every verdict on synthetic snapshot sequences, with the numbers that decided it and the remedy."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from classifier_synth import (
    COMPUTE,
    CPU,
    IDLE,
    NETWORK,
    STORAGE,
    SYNC,
    Regime,
    fast_cfg,
    like,
    run,
    snapshot,
)

from agent.classifier.baselines import Baselines
from agent.classifier.engine import Engine
from agent.classifier.features import measure
from agent.classifier.samples import sample_from_snapshot
from agent.classifier.scores import decide, score
from agent.classifier.verdict import classify


def last(r):
    return r.evaluations[-1].current


@pytest.mark.parametrize("gpm", [True, False], ids=["gpm", "power-only"])
@pytest.mark.parametrize(
    ("regime", "label"),
    [
        (COMPUTE, "compute"),
        (STORAGE, "data/storage"),
        (CPU, "data/cpu"),
        (NETWORK, "network"),
        (SYNC, "sync-wait"),
        (IDLE, "idle"),
    ],
    ids=["compute", "storage", "cpu", "network", "sync", "idle"],
)
def test_each_verdict(regime: Regime, label: str, gpm: bool) -> None:
    r = run(like(regime, gpm=gpm))
    assert r.verdict == label
    v = last(r)
    assert v.scores[v.verdict] == max(v.scores.values())
    assert v.hint
    assert v.reasons[0].startswith("GPU busy ")


def test_compute_reasons_and_scores() -> None:
    v = last(run(COMPUTE))
    # a kernel ran 97% of each second: the other 3% starved, whatever its SMs did meanwhile
    assert v.scores["compute"] == 0.97
    assert "GPU busy 97% (p5 97%, p95 97%), real work 80% (SM activity)" in v.reasons
    assert "GPUs doing real work 97% of the time" in v.reasons
    assert "Healthy" in v.hint


def test_storage_reasons_carry_the_numbers() -> None:
    v = last(run(STORAGE))
    text = "\n".join(v.reasons)
    assert re.search(r"GPU busy \d+% \(p5 0%, p95 97%\)", text)
    assert "GPUs starved (low utilization, no real work) 70% of the time" in text
    assert (
        "disk vda read 140 MB/s on average = 100% of ~200 MB/s capacity (learned) "
        "over the 70% of the time the GPUs starved"
    ) in text
    # 21% iowait and 49% PSI over the window, all of it while the GPUs starved
    assert "iowait 30% of CPU time while the GPUs starved" in text
    assert "tasks stalled on I/O (PSI io) 70% of the time the GPUs starved" in text
    assert v.sub_reason == "storage"
    assert "local NVMe" in v.hint and "CPFS" in v.hint and "nconnect" in v.hint


def test_nfs_rtt_against_its_learned_baseline() -> None:
    """A slow NFS server: reads far below any capacity, but READ RTT ten times its baseline."""
    healthy = like(COMPUTE, nfs_rtt_idle=0.004, seconds=20)
    slow = Regime(("starved", "starved", "work"), nfs_read=30e6, nfs_rtt=0.038, nfs_rtt_idle=0.038)
    cfg = fast_cfg(nfs_capacity={"/mnt/data": "1.2GB/s"})
    r = run(healthy, slow, cfg=cfg)
    v = last(r)
    assert v.label == "data/storage"
    assert r.engine.baselines.nfs_rtt["/mnt/data"] == pytest.approx(0.004)
    assert "NFS /mnt/data READ RTT 38 ms (baseline 4 ms)" in v.reasons


def test_nfs_at_configured_capacity() -> None:
    r = run(
        Regime(("starved", "starved", "work"), nfs_read=1.17e9),
        cfg=fast_cfg(nfs_capacity={"/mnt/data": "1.2GB/s"}),
    )
    v = last(r)
    assert v.label == "data/storage"
    assert (
        "NFS /mnt/data read 819 MB/s on average = 98% of 1.2 GB/s capacity "
        "over the 70% of the time the GPUs starved"
    ) in v.reasons


def test_cpu_reasons_and_hint() -> None:
    v = last(run(CPU))
    assert (
        "trainer pid 4242 (python) +3 workers using 3.90 of 4.00 allowed cores (97%); 0.1 allowed cores idle"
    ) in v.reasons
    # every allowed core busy: more workers would not help
    assert "every allowed core is busy" in v.hint and "DALI" in v.hint and "vCPUs per GPU" in v.hint


def test_network_reasons_and_hint() -> None:
    v = last(run(NETWORK))
    assert (
        "NIC eth0 moved 2.03 GB/s on average = 96% of 3.12 GB/s capacity "
        "over the 68% of the time the GPUs waited"
    ) in v.reasons
    assert "eRDMA" in v.hint and "NCCL_SOCKET_IFNAME" in v.hint and "bucket" in v.hint


def test_network_by_rdma_congestion_alone() -> None:
    """RDMA ports far from their rate, but CNPs pouring in while the GPUs spin: congestion."""
    r = run(Regime(("spin", "spin", "work"), rdma=2e9, cnp=5000.0))
    v = last(r)
    assert v.verdict == "network"
    # 5000 CNP/s over the window, per second of waiting: the spins' 5% of real work is not a wait
    assert "RDMA mlx5_0/1 congestion: 5182 CNP/s while the GPUs waited" in v.reasons


def test_network_on_a_virtual_nic_uses_the_learned_peak() -> None:
    v = last(run(like(NETWORK, nic_speed=None)))
    assert v.verdict == "network"
    assert any("= 104% of ~2.9 GB/s capacity (learned)" in x for x in v.reasons)


def test_sync_wait_reasons_and_hint() -> None:
    v = last(run(SYNC))
    assert v.verdict == "sync-wait"
    assert any(x.startswith("GPUs spinning 67% of the time: utilization 100% with 4%") for x in v.reasons)
    assert (
        "network quiet meanwhile: busiest NIC eth0 moved 240 KB/s on average = 0% of 3.12 GB/s "
        "capacity over the 67% of the time the GPUs spun"
    ) in v.reasons
    assert "slow rank" in v.hint


def test_idle_without_processes_and_stalled_with_them() -> None:
    v = last(run(IDLE))
    assert v.verdict == "idle" and "no training processes" in v.reasons
    stalled = last(run(Regime(("starved",))))
    assert stalled.verdict == "idle"
    assert any("training processes present (pid 4242" in x for x in stalled.reasons)
    assert "hung" in stalled.hint


def test_no_training_process_is_never_a_bottleneck() -> None:
    """Disks and NICs busy with something else while no job runs: still idle."""
    r = run(like(IDLE, disk_read=500e6, iowait=0.5, nic=3e9, nic_speed=3_125_000_000))
    assert r.verdict == "idle"


def test_mixed_when_no_class_clearly_wins() -> None:
    # a third each working, spinning on a quiet link and starved with nothing pressing (a half
    # starved by storage at its ceiling is data: the pipeline limits the job, scores.py)
    half = Regime(("starved", "spin", "work"))
    # judged on a half-full window (with less, the first verdict may settle either way and then
    # keep its exit band: that is the hysteresis, not the question here)
    r = run(half, cfg=fast_cfg(min_window_fill=0.5))
    v = last(r)
    assert v.verdict == "mixed"
    assert any(x.startswith("no class clearly wins: ") for x in v.reasons)


def test_gpu_health_beside_the_verdict_not_instead() -> None:
    e = Engine(fast_cfg())
    for t in range(1, 21):
        snap = snapshot(t, float(t), COMPUTE, "work")
        hot = replace(
            snap.parts["gpu"].gpus[1], clocks_event_reasons=0x40, xid_counts={79: 1} if t > 15 else {}
        )
        lost = replace(snap.parts["gpu"].gpus[0], up=t < 18)
        e.add_snapshot(replace(snap, gpu=replace(snap.parts["gpu"], gpus=(lost, hot))))
    v = e.current
    assert v.verdict == "compute"
    assert "GPU 1 thermal throttling (hardware) 100% of the time" in v.health
    assert "GPU 1: 1 Xid error in the window" in v.health
    assert "GPU 0 lost (fell off the bus)" in v.health
    assert not any("GPU" in r and "lost" in r for r in v.reasons)


def test_classify_is_a_pure_function_of_its_inputs() -> None:
    window = [
        sample_from_snapshot(snapshot(i, float(i), STORAGE, STORAGE.phases[i % 3])) for i in range(1, 20)
    ]
    cfg = fast_cfg(disk_capacity={"vda": "210MB/s"})
    a = classify(window, Baselines(), cfg)
    b = classify(list(window), Baselines(), cfg)
    assert a.label == b.label == "data/storage"
    assert a.reasons == b.reasons and a.scores == b.scores
    f = measure(window, Baselines(), cfg)
    assert decide(score(f), None, cfg) == "data"
    assert any("= 95% of 210 MB/s capacity over the " in x for x in a.reasons), a.reasons


def test_a_read_that_outlasts_the_window_is_storage_where_its_reader_is_blocked() -> None:
    """A batch read longer than a window (6 MiB at 4 MiB/s, an NFS server that stalls) completes no
    bytes in most windows, so the training processes "read nothing" while the GPUs starve and the node
    waits on I/O. A training process blocked in uninterruptible sleep meanwhile is the job waiting on
    it: data/storage, with the reason. The same node with the trainer asleep and a neighbour's I/O
    stays discounted (idle), and a trainer blocked in its own writes (a checkpoint's fsync, writing
    fast) is not waiting for input: it is saving (host/checkpoint)."""
    stall = Regime(("starved",) * 9 + ("work",), iowait=0.5, psi_io=0.9, trainer_read=0.0, cores=0.05)
    v = last(run(like(stall, blocked=True)))
    assert v.label == "data/storage", (v.label, v.reasons)
    said = "a training process blocked on I/O (uninterruptible) 100% of the time the GPUs starved"
    assert said in v.reasons
    assert v.features.storage_pressure == pytest.approx(v.features.io_pressure)
    w = last(run(like(stall)))
    assert w.label != "data/storage" and w.features.storage_pressure == 0.0, (w.label, w.reasons)
    assert "counted 0%: the training processes read only 0 B/s" in " ".join(w.reasons), w.reasons
    saving = last(run(like(stall, blocked=True, trainer_write=50e6)))
    assert saving.label == "host/checkpoint" and saving.features.storage_pressure == 0.0, saving.reasons
    assert "checkpoint saves held the GPUs" in saving.reasons[1], saving.reasons


def test_a_neighbours_io_does_not_make_a_cpu_bound_trainer_storage_bound() -> None:
    """Host-wide PSI io and iowait from someone else while the trainer's workers burn their cores and
    the trainer itself reads next to nothing: data/cpu, and the reasons say why the I/O was discounted."""
    noisy = like(CPU, iowait=0.3, psi_io=0.8, trainer_read=200.0)
    v = last(run(noisy))
    assert v.label == "data/cpu"
    assert v.features.io_pressure == 1.0 and v.features.storage_pressure < 0.01
    assert (
        "I/O pressure on the node (iowait 30% of CPU time while the GPUs starved) counted 0%: "
        "the training processes read only 200 B/s"
    ) in v.reasons
    # the same node, but the trainer is the one reading: storage
    reading = like(STORAGE, trainer_read=150e6)
    v2 = last(run(reading))
    assert v2.label == "data/storage"
    assert "training processes read 150 MB/s on average" in v2.reasons
