"""Our text exposition against prometheus_client's own ``generate_latest``: the same bytes for random
families (odd names, label values with quotes, backslashes and newlines, special floats, timestamps,
OpenMetrics-only samples) and for a live agent's registry."""

from __future__ import annotations

import asyncio
import math

from conftest import async_wait_until, free_port
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric

from agent.config import parse_config
from agent.exporter.text import render_text
from agent.runtime.daemon import Daemon

NAME = st.text(alphabet="abcxyz_:ABC019.é-", min_size=1, max_size=12)
LABEL = st.text(alphabet="abcxyz_AB019.é-", min_size=1, max_size=8)
VALUE = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**60), 2**60).map(float)
TYPES = ["gauge", "counter", "info", "stateset", "gaugehistogram", "unknown", "summary", "histogram"]
SUFFIXES = ["", "_total", "_created", "_gsum", "_gcount", "_bucket", "_sum"]


@st.composite
def families(draw: st.DrawFn) -> list[Metric]:
    out = []
    for _ in range(draw(st.integers(0, 5))):
        name = draw(NAME)
        m = Metric(name, draw(st.text(max_size=20)), draw(st.sampled_from(TYPES)))
        for _ in range(draw(st.integers(0, 6))):
            labels = draw(st.dictionaries(LABEL, st.text(max_size=12), max_size=3))
            ts = draw(st.none() | st.floats(0, 2e9))
            m.add_sample(name + draw(st.sampled_from(SUFFIXES)), labels, draw(VALUE), ts)
        out.append(m)
    return out


class Fixed:
    def __init__(self, fams: list[Metric]) -> None:
        self.fams = fams

    def collect(self) -> list[Metric]:
        return self.fams


def reference(fams: list[Metric]) -> bytes:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(Fixed(fams))
    return generate_latest(reg)


@settings(max_examples=400, deadline=None)
@given(families())
def test_same_bytes_as_generate_latest(fams: list[Metric]) -> None:
    assert render_text(fams) == reference(fams)


async def test_a_live_agents_registry_renders_the_same(tmp_path) -> None:
    cfg = parse_config(
        {
            "agent": {
                "interval": "100ms",
                "state_dir": str(tmp_path / "s"),
                "runtime_dir": str(tmp_path / "r"),
            },
            "http": {"listen": f"127.0.0.1:{free_port()}", "control_socket": str(tmp_path / "r" / "c.sock")},
            "trainer": {"discovery_file": str(tmp_path / "r" / "agent.json")},
            "preemption": {"provider": "none"},
        }
    )
    daemon = Daemon(cfg, None)
    run = asyncio.create_task(daemon.run())
    try:
        await async_wait_until(lambda: daemon._latest().seq >= 5, timeout=30, what="5 ticks")
        fams = list(daemon.registry.collect())
        assert len(fams) > 30
        assert render_text(fams) == reference(fams)
        # what a scrape sends: each collector's text, the snapshot's kept until the next tick
        reg, snap_text = daemon.registry, daemon._exporter.text
        assert reg.text() == generate_latest(reg)
        seq, kept = daemon._latest().seq, snap_text()
        assert snap_text() is kept  # no tick in between: the loop did not run
        await async_wait_until(lambda: daemon._latest().seq > seq, timeout=10, what="a tick")
        assert snap_text() != kept  # a new snapshot, a new text (its timestamp at least)
        renderers = daemon._exporter.renderers
        daemon._exporter.renderers = []  # as a reload that turns every source off would
        assert len(snap_text()) < len(kept) / 2
        daemon._exporter.renderers = renderers
        assert reg.text() == generate_latest(reg)
    finally:
        daemon._stop.set()
        await run


def test_special_values_are_spelled_as_go_does() -> None:
    m = Metric("x", "d", "gauge")
    for v in (math.inf, -math.inf, math.nan, 1e21, 0.1):
        m.add_sample("x", {"v": repr(v)}, v)
    text = render_text([m]).decode()
    assert "+Inf" in text and "-Inf" in text and "NaN" in text and "1e+21" in text
