"""training_node_gpu_* families rendered from snapshots, and promtool's verdict on them."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import subprocess
from functools import partial

from conftest import need_binary
from gpu_fixtures import fake_nvml, fake_nvml_library  # noqa: F401
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.devtools.fake_nvml import FakeNvml
from agent.exporter import SnapshotExporter
from agent.snapshot import NodeSnapshot
from agent.sources.gpu import metrics as gpu_metrics
from agent.sources.gpu.collector import GpuCollector
from agent.sources.gpu.part import GpuPart, GpuProcess, GpuStats


def exposition(part: GpuPart | None, processes: bool = True) -> str:
    snap = NodeSnapshot(seq=1, timestamp=0.0, monotonic=0.0, gpu=part)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotExporter(lambda: snap, [partial(gpu_metrics.render, processes=processes)]))
    return generate_latest(reg).decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def gpu(index: int, **kw) -> GpuStats:
    return GpuStats(index, f"GPU-{index}", "NVIDIA H100 80GB HBM3", True, **kw)


def ids(index: int, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted({"gpu": str(index), "uuid": f"GPU-{index}", "model": "NVIDIA H100 80GB HBM3", **extra}.items())
    )


def test_every_family_with_its_unit_and_labels() -> None:
    g = gpu(
        0,
        utilization=0.93,
        memory_utilization=0.5,
        memory_used_bytes=10,
        memory_total_bytes=20,
        power_watts=650.5,
        power_limit_watts=700.0,
        temperature_celsius=71.0,
        sm_clock_hertz=1.98e9,
        clocks_event_reasons=0x44,
        pcie_tx_bytes=1,
        pcie_rx_bytes=2,
        nvlink_tx_bytes=3072,
        nvlink_rx_bytes=4096,
        sm_active=0.8,
        tensor_active=0.4,
        dram_active=0.6,
        ecc_uncorrected_total=5,
        row_remap_failure=True,
        row_remap_pending=False,
        processes=(GpuProcess(4242, 1000), GpuProcess(7, None)),
        xid_counts={79: 2, 48: 1},
        pci_bus_id="00000000:18:00.0",
    )
    s = samples(exposition(GpuPart("550.90.07", "12.550.90.07", (g,))))
    expected = {
        "training_node_gpu_up": 1.0,
        "training_node_gpu_utilization_ratio": 0.93,
        "training_node_gpu_memory_utilization_ratio": 0.5,
        "training_node_gpu_memory_used_bytes": 10,
        "training_node_gpu_memory_total_bytes": 20,
        "training_node_gpu_power_watts": 650.5,
        "training_node_gpu_power_limit_watts": 700.0,
        "training_node_gpu_temperature_celsius": 71.0,
        "training_node_gpu_sm_clock_hertz": 1.98e9,
        "training_node_gpu_sm_active_ratio": 0.8,
        "training_node_gpu_tensor_active_ratio": 0.4,
        "training_node_gpu_dram_active_ratio": 0.6,
        "training_node_gpu_clocks_event_reasons": 0x44,
        "training_node_gpu_pcie_tx_bytes_total": 1,
        "training_node_gpu_pcie_rx_bytes_total": 2,
        "training_node_gpu_nvlink_tx_bytes_total": 3072,
        "training_node_gpu_nvlink_rx_bytes_total": 4096,
        "training_node_gpu_ecc_uncorrected_errors_total": 5,
        "training_node_gpu_row_remap_failure": 1,
        "training_node_gpu_row_remap_pending": 0,
        "training_node_gpu_processes": 2,
    }
    for name, value in expected.items():
        assert s[(name, ids(0))] == value, name
    # the Xid counter is GPU health's (it counts the kernel log's Xids too): not the snapshot's
    assert not any(name.startswith("training_node_gpu_xid_errors") for name, _ in s)
    assert s[("training_node_gpu_clocks_event_active", ids(0, reason="sw_thermal_slowdown"))] == 0
    assert s[("training_node_gpu_clocks_event_active", ids(0, reason="hw_thermal_slowdown"))] == 1
    assert s[("training_node_gpu_clocks_event_active", ids(0, reason="sw_power_cap"))] == 1
    assert s[("training_node_gpu_process_memory_used_bytes", ids(0, pid="4242"))] == 1000
    assert ("training_node_gpu_process_memory_used_bytes", ids(0, pid="7")) not in s  # unknown: no series
    # GpuStats made without them
    readings = {"utilization_source": "none", "power_source": "none", "clocks_event_source": "none"}
    assert s[("training_node_gpu_info", ids(0, pci_bus_id="00000000:18:00.0", **readings))] == 1
    driver = (("driver_version", "550.90.07"), ("nvml_version", "12.550.90.07"))
    assert s[("training_node_gpu_driver_info", driver)] == 1


def test_values_a_gpu_cannot_give_have_no_series() -> None:
    up = gpu(0, power_watts=100.0)
    down = GpuStats(1, "GPU-1", "NVIDIA H100 80GB HBM3", False)
    text = exposition(GpuPart("550", "12", (up, down)))
    s = samples(text)
    assert s[("training_node_gpu_up", ids(1))] == 0.0
    assert s[("training_node_gpu_power_watts", ids(0))] == 100.0
    assert ("training_node_gpu_power_watts", ids(1)) not in s
    assert "training_node_gpu_sm_active_ratio" not in text  # nobody has it: no empty family either
    assert ("training_node_gpu_processes", ids(1)) not in s
    assert "training_node_gpu" not in exposition(None)


def test_per_process_series_can_be_turned_off() -> None:
    part = GpuPart("550", "12", (gpu(0, processes=(GpuProcess(1, 5),)),))
    assert "training_node_gpu_process_memory_used_bytes" in exposition(part)
    text = exposition(part, processes=False)
    assert "training_node_gpu_process_memory_used_bytes" not in text
    assert samples(text)[("training_node_gpu_processes", ids(0))] == 1


def test_promtool_accepts_eight_fake_gpus(fake_nvml: FakeNvml, fake_nvml_library) -> None:
    promtool = need_binary("promtool", "prometheus")
    fake_nvml.set(0, processes=[{"pid": 100, "used_memory_bytes": 5 << 30}], clocks_event_reasons=0x4)
    fake_nvml.set(3, lost=True)
    fake_nvml.set(5, unsupported=["nvmlDeviceGetTotalEccErrors"])
    c = GpuCollector(library=str(fake_nvml_library), xid_events=False)
    try:
        part = c.collect()
    finally:
        c.close()
    text = exposition(part)
    assert text.count("training_node_gpu_up{") == 8
    res = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert res.stdout + res.stderr == "", res.stdout + res.stderr
