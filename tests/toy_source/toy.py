"""A toy source, whole in one file: it counts its own calls, and has a part, rates, metrics and
status lines like a real source. Registering it (importing this module) is all it takes for the
sampler, the snapshot, /metrics and the status to show it."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.core.projection import fields
from agent.snapshot import NodeSnapshot
from agent.sources.registry import Source, register


@dataclass(frozen=True, slots=True)
class ToyPart:
    source: ClassVar[str] = "toy"  # how a snapshot finds it

    calls: int  # cumulative
    mood: str


@dataclass(frozen=True, slots=True)
class ToyRates:
    source: ClassVar[str] = "toy"

    toy_calls: dict[str, float] = field(default_factory=dict)  # mood -> calls per second


class ToyCollector:
    name = "toy"
    part = "toy"

    def __init__(self, mood: str) -> None:
        self._count = itertools.count(1)
        self._mood = mood

    def collect(self) -> ToyPart:
        return ToyPart(next(self._count), self._mood)

    def close(self) -> None:
        pass


def toy_rates(prev: ToyPart, cur: ToyPart, dt: float) -> ToyRates:
    return ToyRates({cur.mood: (cur.calls - prev.calls) / dt})


def render(snap: NodeSnapshot) -> Iterable[Metric]:
    part = snap.part(ToyPart)  # typed: a ToyPart or None, as for any source
    if part is None:
        return
    c = CounterMetricFamily("training_node_toy_calls", "Calls of the toy collector.", labels=["mood"])
    c.add_metric([part.mood], part.calls)
    yield c
    rate = snap.rates.of(ToyRates).toy_calls.get(part.mood)
    if rate is not None:
        g = GaugeMetricFamily("training_node_toy_calls_per_second", "Toy calls per second.", labels=["mood"])
        g.add_metric([part.mood], rate)
        yield g


def summary(part: ToyPart, rates: ToyRates) -> dict[str, Any]:
    return {
        "toy": {"calls": part.calls, "mood": part.mood, "calls_per_second": rates.toy_calls.get(part.mood)}
    }


def lines(summarized: Mapping[str, Any]) -> list[str]:
    toy = summarized.get("toy")
    return [f"\n[toy] {toy['mood']}, {toy['calls']} calls"] if toy else []


SOURCE = register(
    Source(
        name="toy",
        part_type=ToyPart,
        build=lambda ctx: ToyCollector(f"cheerful on {ctx.cfg.agent.procfs}"),
        rates_type=ToyRates,
        rates=toy_rates,
        metrics=lambda cfg: render,
        status=summary,
        status_lines=lines,
        tcp_view={"toy": fields("calls")},  # the mood stays on the control socket
        order=99,
    )
)
