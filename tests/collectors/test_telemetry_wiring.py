"""How the daemon wires the storage, network and process collectors and their metric families."""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, generate_latest

from agent.config import parse_config
from agent.exporter import SnapshotExporter
from agent.runtime import build
from agent.snapshot import NodeSnapshot
from agent.sources import registry
from agent.sources.gpu.part import GpuPart, GpuProcess, GpuStats
from agent.sources.network.part import NetworkPart, NicStat, RdmaPort
from agent.sources.processes.part import ProcessPart, ProcessStat
from agent.sources.storage.part import StoragePart


def _snap(**parts) -> NodeSnapshot:
    return NodeSnapshot(seq=1, timestamp=0.0, monotonic=0.0, **parts)


def _exposition(cfg, snap: NodeSnapshot) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotExporter(lambda: snap, build.build_renderers(cfg)))
    return generate_latest(reg).decode()


def test_training_pids_are_the_gpu_compute_processes():
    gpu = GpuPart(
        "550",
        "12",
        (
            GpuStats(0, "GPU-a", "H800", True, processes=(GpuProcess(101, 1), GpuProcess(102, None))),
            GpuStats(1, "GPU-b", "H800", True, processes=(GpuProcess(101, 1),)),
        ),
    )
    assert build.training_pids(_snap(gpu=gpu)) == {101, 102}
    assert build.training_pids(_snap()) == set()
    assert build.training_pids(_snap(gpu=gpu), [lambda: [7]]) == {7, 101, 102}


def test_collectors_follow_the_config():
    names = [c.name for c in build.build_collectors(parse_config({}))]
    assert {"storage", "network", "processes"} <= set(names)
    cfg = parse_config({"storage": {"enabled": False}, "network": {"enabled": False}})
    names = [c.name for c in build.build_collectors(cfg)]
    assert "storage" not in names and "network" not in names


def test_a_section_switched_off_is_neither_built_nor_rendered():
    """The registry checks ``[section] enabled`` once for every source (registry.enabled)."""
    sectioned = [s for s in registry.sources() if s.config_section is not None]
    assert {s.name for s in sectioned} >= {"gpu", "storage", "network", "jobs"}
    cfg = parse_config({s.config_section: {"enabled": False} for s in sectioned if s.config_section})
    built = {c.name for c in build.build_collectors(cfg)}
    assert not built & {s.name for s in sectioned}
    assert len(registry.renderers(cfg)) == len(
        [s for s in registry.sources() if s.config_section is None and s.metrics is not None]
    )


def test_process_collector_follows_the_latest_snapshot(tmp_path):
    proc = tmp_path / "proc"
    (proc / "77").mkdir(parents=True)
    (proc / "77" / "stat").write_text("77 (python) S 1 1 1 0 -1 0 0 0 0 0 250 50 0 0 20 0 3 0 99 0\n")
    cfg = parse_config({"agent": {"procfs": str(proc), "sysfs": str(tmp_path)}})
    snap = _snap(gpu=GpuPart(None, None, (GpuStats(0, "u", "m", True, processes=(GpuProcess(77, 1),)),)))
    (c,) = [c for c in build.build_collectors(cfg, lambda: snap) if c.name == "processes"]
    (p,) = c.collect().processes
    assert (p.pid, p.cpu_seconds, p.threads, p.allowed_cores) == (77, 3.0, 3, float(os.cpu_count()))


def test_disabled_sources_leave_no_families_and_unknown_counters_no_series():
    nics = (NicStat("eth0", 1, 2, 3, 4, 5, 6, 7, 8, 125_000_000), NicStat("ib0", *[None] * 9))
    snap = _snap(
        storage=StoragePart((), (), malformed_lines=1, malformed_lines_total=4),
        network=NetworkPart(nics, (RdmaPort("erdma_0", 1, 10, 20, None),)),
        processes=ProcessPart((ProcessStat(5, 9, "py thon", 1.5, None, 7, 2.0, 4, 1),)),
    )
    text = _exposition(parse_config({}), snap)
    assert 'training_node_network_receive_bytes_total{device="eth0"} 1.0' in text
    assert 'device="ib0"' not in text  # no counters, no speed: no series rather than zeros
    assert 'training_node_rdma_receive_bytes_total{device="erdma_0",port="1"} 10.0' in text
    assert "training_node_rdma_transmit_wait_ticks_total{" not in text
    assert 'training_node_collector_malformed_lines_total{collector="storage"} 4.0' in text
    assert 'training_node_process_cpu_seconds_total{comm="py thon",pid="5"} 1.5' in text
    assert "training_node_process_storage_read_bytes_total{" not in text
    off = _exposition(parse_config({"storage": {"enabled": False}, "network": {"enabled": False}}), snap)
    assert "training_node_disk_" not in off and "training_node_network_" not in off
