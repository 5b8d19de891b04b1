"""training_node_host_* families."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.snapshot import NodeSnapshot
from agent.sources.host.part import HostPart
from agent.sources.host.rates import HostRates


def render(snap: NodeSnapshot) -> Iterable[Metric]:
    host = snap.part(HostPart)
    if host is None:
        return
    if host.cpu is not None:
        cpu = CounterMetricFamily(
            "training_node_host_cpu_seconds", "Host CPU time by mode, all CPUs.", labels=["mode"]
        )
        for mode in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"):
            cpu.add_metric([mode], getattr(host.cpu, mode))
        yield cpu
    r = snap.rates.of(HostRates)
    for name, value, doc in (
        ("busy", r.cpu_busy_ratio, "Share of CPU time busy over the last sampling interval."),
        ("iowait", r.cpu_iowait_ratio, "Share of CPU time in iowait over the last sampling interval."),
        ("steal", r.cpu_steal_ratio, "Share of CPU time stolen by the hypervisor over the last interval."),
    ):
        if value is not None:
            g = GaugeMetricFamily(f"training_node_host_cpu_{name}_ratio", doc)
            g.add_metric([], value)
            yield g
    g = GaugeMetricFamily("training_node_host_cpus", "Number of CPUs the host reports.")
    g.add_metric([], host.cpu_count)
    yield g
    if host.load1 is not None:
        g = GaugeMetricFamily("training_node_host_load", "Load average.", labels=["period"])
        g.add_metric(["1m"], host.load1)
        g.add_metric(["5m"], host.load5 or 0.0)
        g.add_metric(["15m"], host.load15 or 0.0)
        yield g
    for attr, name, doc in (
        ("memory_total_bytes", "training_node_host_memory_total_bytes", "MemTotal."),
        ("memory_available_bytes", "training_node_host_memory_available_bytes", "MemAvailable."),
    ):
        value = getattr(host, attr)
        if value is not None:
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], value)
            yield g
    if host.pressure:
        waiting = CounterMetricFamily(
            "training_node_pressure_waiting_seconds",
            "PSI: time some task was stalled on the resource.",
            labels=["resource"],
        )
        stalled = CounterMetricFamily(
            "training_node_pressure_stalled_seconds",
            "PSI: time all non-idle tasks were stalled on the resource.",
            labels=["resource"],
        )
        avg = GaugeMetricFamily(
            "training_node_pressure_some_avg10_ratio", "PSI some avg10 as a ratio.", labels=["resource"]
        )
        for res, p in sorted(host.pressure.items()):
            waiting.add_metric([res], p.some_total_seconds)
            avg.add_metric([res], p.some_avg10 / 100.0)
            if p.full_total_seconds is not None:
                stalled.add_metric([res], p.full_total_seconds)
        yield waiting
        yield stalled
        yield avg
