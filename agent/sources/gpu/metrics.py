"""training_node_gpu_* families. A value NVML cannot give on a GPU has no series for that GPU."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import attrgetter

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

from agent.snapshot import NodeSnapshot
from agent.sources.gpu.part import FIGURES, GpuPart, GpuStats
from agent.sources.gpu.reasons import LABELS as CLOCK_LABELS

LABELS = ["gpu", "uuid", "model"]

Value = Callable[[GpuStats], float | int | bool | None]


def _table(counter: bool) -> tuple[tuple[str, str, Value], ...]:
    return tuple((fig.metric, fig.help, attrgetter(name)) for name, fig in FIGURES if fig.counter is counter)


GAUGES = _table(counter=False)
COUNTERS = _table(counter=True)


def _labels(g: GpuStats) -> list[str]:
    return [str(g.index), g.uuid, g.model]


def _per_gpu(family: GaugeMetricFamily | CounterMetricFamily, gpus: Iterable[GpuStats], value: Value) -> bool:
    found = False
    for g in gpus:
        v = value(g)
        if v is not None:
            family.add_metric(_labels(g), float(v))
            found = True
    return found


def render(snap: NodeSnapshot, processes: bool = True) -> Iterable[Metric]:
    part = snap.part(GpuPart)
    if part is None:
        return
    driver = InfoMetricFamily("training_node_gpu_driver", "NVIDIA driver and NVML versions.")
    driver.add_metric(
        [], {"driver_version": part.driver_version or "", "nvml_version": part.nvml_version or ""}
    )
    yield driver
    info = InfoMetricFamily("training_node_gpu", "One series per GPU NVML enumerates.", labels=LABELS)
    up = GaugeMetricFamily(
        "training_node_gpu_up", "1 while the GPU answers NVML, 0 once it is lost.", labels=LABELS
    )
    for g in part.gpus:
        info.add_metric(
            _labels(g),
            {
                "pci_bus_id": g.pci_bus_id or "",
                "utilization_source": str(g.utilization_source),
                "power_source": str(g.power_source),
                "clocks_event_source": str(g.clocks_event_source),
            },
        )
        up.add_metric(_labels(g), 1.0 if g.up else 0.0)
    yield info
    yield up
    for suffix, doc, value in GAUGES:
        fam = GaugeMetricFamily(f"training_node_gpu_{suffix}", doc, labels=LABELS)
        if _per_gpu(fam, part.gpus, value):
            yield fam
    for suffix, doc, value in COUNTERS:
        cfam = CounterMetricFamily(f"training_node_gpu_{suffix}", doc, labels=LABELS)
        if _per_gpu(cfam, part.gpus, value):
            yield cfam
    reasons = GaugeMetricFamily(
        "training_node_gpu_clocks_event_active",
        "1 while NVML reports this clocks event (throttle) reason.",
        labels=[*LABELS, "reason"],
    )
    nvlink = CounterMetricFamily(
        "training_node_gpu_nvlink_errors",
        "NVLink errors since the driver loaded, all links together, by NVML counter.",
        labels=[*LABELS, "counter"],
    )
    seconds = CounterMetricFamily(
        "training_node_gpu_clocks_event_seconds",
        "Time under each clocks event reason since the driver loaded (NVML's counters, Hopper and later).",
        labels=[*LABELS, "reason"],
    )
    for g in part.gpus:
        for reason, ns in g.clocks_event_ns.items():
            seconds.add_metric([*_labels(g), reason.label], ns / 1e9)
        for counter, count in g.nvlink_errors.items():
            nvlink.add_metric([*_labels(g), str(counter)], count)
        if g.clocks_event_reasons is not None:
            for bit, label in CLOCK_LABELS:
                reasons.add_metric([*_labels(g), label], 1.0 if g.clocks_event_reasons & bit else 0.0)
    if reasons.samples:
        yield reasons
    if nvlink.samples:
        yield nvlink
    if seconds.samples:
        yield seconds
    yield from _processes(part.gpus, processes)


def _processes(gpus: Iterable[GpuStats], per_process: bool) -> Iterable[Metric]:
    count = GaugeMetricFamily("training_node_gpu_processes", "Compute processes on the GPU.", labels=LABELS)
    memory = GaugeMetricFamily(
        "training_node_gpu_process_memory_used_bytes",
        "Device memory used by one compute process.",
        labels=[*LABELS, "pid"],
    )
    for g in gpus:
        if not g.up:
            continue
        count.add_metric(_labels(g), len(g.processes))
        for p in g.processes if per_process else ():
            if p.used_memory_bytes is not None:
                memory.add_metric([*_labels(g), str(p.pid)], p.used_memory_bytes)
    if count.samples:
        yield count
    if memory.samples:
        yield memory
