"""A GPU figure is declared once, beside its field in ``GpuStats`` (``agent/sources/gpu/part.py``):
its metric and its status key are read from there. A figure that feeds the verdict then takes four
files: the field (part.py), its read (collector.py), the classifier's sample (samples.py) and its
judge (gpus.py). Each test here names the piece a new figure left out."""

# ruff: noqa: F811 - pytest fixtures imported from gpu_fixtures are used as parameters
from __future__ import annotations

import time
from dataclasses import fields, replace
from pathlib import Path

from gpu_fixtures import Stuck, fake_nvml, fake_nvml_library  # noqa: F401

from agent.classifier.samples import GpuSample, sample_from_snapshot
from agent.devtools.fake_nvml import FakeNvml
from agent.snapshot import NodeSnapshot
from agent.sources.gpu import metrics
from agent.sources.gpu.collector import GpuCollector
from agent.sources.gpu.part import FIGURES, ActivityWindow, GpuPart, GpuStats
from agent.sources.gpu.rates import GpuRates
from agent.sources.gpu.status import summary

# what a classifier sample says of a GPU that is no reading of it
IDENTITY = {"nvml_index", "uuid", "up", "throttle", "xids"}


def test_every_field_is_a_declared_figure_or_shown_by_hand() -> None:
    undeclared = [
        f.name for f in fields(GpuStats) if "figure" not in f.metadata and "by_hand" not in f.metadata
    ]
    assert not undeclared, (
        f"GpuStats fields shown nowhere: declare each with figure(...) in part.py: {undeclared}"
    )
    metric_names = [fig.metric for _, fig in FIGURES]
    assert len(metric_names) == len(set(metric_names)), "two figures share a metric name"


def test_every_figure_is_rendered_and_in_the_status() -> None:
    values = {name: 1 + i for i, (name, _) in enumerate(FIGURES)}
    g = GpuStats(0, "GPU-0", "NVIDIA H100 80GB HBM3", True, **values)
    snap = NodeSnapshot(seq=1, timestamp=0.0, monotonic=0.0, parts={"gpu": GpuPart("550", "12.550", (g,))})
    rendered = {s.name for fam in metrics.render(snap) for s in fam.samples}
    status = summary(GpuPart("550", "12.550", (g,)), GpuRates())["gpus"][0]
    for name, fig in FIGURES:
        metric = f"training_node_gpu_{fig.metric}" + ("_total" if fig.counter else "")
        assert metric in rendered, f"GpuStats.{name}: declared as {metric}, not rendered by metrics.py"
        key = fig.status_key()
        if key is not None:
            assert status.get(key) == values[name], f"GpuStats.{name}: not in the status as {key!r}"


def test_the_collector_fills_every_figure_a_capable_gpu_has(
    fake_nvml: FakeNvml, fake_nvml_library: Path
) -> None:
    """A busy H100 that answers every call the agent makes: each figure the fake can give has a value
    from the second tick on (GPM, the buffer and the energy counter report between two reads)."""
    fake_nvml.set(
        0,
        utilization_gpu=90,
        utilization_memory=40,
        power_mw=500_000,
        sm_active=70.0,
        tensor_active=40.0,
        dram_active=30.0,
        nvlink_tx_kib=1,
        nvlink_rx_kib=1,
        ecc_uncorrected=0,
        row_remap_failure=False,
        processes=[{"pid": 4242, "used_memory_bytes": 1 << 30}],
    )
    c = GpuCollector(library=str(fake_nvml_library), call_timeout=0.3)
    try:
        c.collect()
        time.sleep(0.3)  # more than GPM's 100 ms floor, and two samples of the buffer
        g = c.collect().gpus[0]
        fake_nvml.set(1, delay_ms=1500)  # and one GPU whose calls hang: the figure that says so
        stuck = Stuck(c)  # a call stuck in it, joined past call_timeout as the sampler joins it
        time.sleep(0.4)
        hung = c.collect().gpus[1]
        fake_nvml.set(1, delay_ms=0)
        stuck.thread.join(5)
    finally:
        c.close()
    missing = [name for name, _ in FIGURES if getattr(g, name) is None and name != "unresponsive_seconds"]
    assert not missing, f"figures the collector never fills on a GPU that has them: {missing}"
    assert g.unresponsive_seconds is None and hung.unresponsive_seconds is not None and not hung.up


def test_every_classifier_input_comes_from_a_figure() -> None:
    """Each reading in the classifier's GpuSample is one figure's value (distinct values per figure
    tell which); a GpuSample field filled from nowhere is named."""
    numeric = [n for n, _ in FIGURES if n not in {"clocks_event_reasons"}]
    values: dict[str, object] = {name: 0.01 * (i + 1) for i, name in enumerate(numeric)}
    # the GPM windows inside the tick: a classifier input the status shows by hand (their count)
    values["activity_windows"] = (ActivityWindow(0.25, 0.9, 0.7), ActivityWindow(0.25, 1.0, 0.05))
    g = replace(GpuStats(3, "GPU-3", "H100", True), **values)
    snap = NodeSnapshot(seq=1, timestamp=0.0, monotonic=0.0, parts={"gpu": GpuPart("550", "12.550", (g,))})
    sample = sample_from_snapshot(snap).gpus[0]
    by_value = {v: name for name, v in values.items()}
    for field_name in GpuSample._fields:
        if field_name in IDENTITY:
            continue
        got = getattr(sample, field_name)
        assert got in by_value, f"GpuSample.{field_name} = {got!r} comes from no declared GPU figure"
