"""The event bus's drops are exported per subscriber, zeros included."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.core.events import AgentLifecycleEvent, EventBus
from agent.core.vocabulary import AgentPhase
from agent.runtime.metrics import bus_families


class _Families:
    def __init__(self, bus: EventBus) -> None:
        self.bus = bus

    def collect(self):
        return bus_families(self.bus)


def _samples(bus: EventBus) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Families(bus))
    text = generate_latest(reg).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_drops_per_subscriber_and_published():
    rnd = random.Random(3)
    size = rnd.randint(2, 9)
    extra = rnd.randint(1, 50)
    bus = EventBus(maxsize=size)
    slow = bus.subscribe("slow")
    keeps_up = bus.subscribe("keeps-up")
    bus.subscribe("other-type", (AgentLifecycleEvent.__mro__[1],))
    for _ in range(size + extra):
        bus.publish(AgentLifecycleEvent(phase=AgentPhase.STARTED, version="t"))
        keeps_up.get_nowait()
    got = _samples(bus)
    assert got[("training_node_events_published_total", ())] == size + extra
    assert got[("training_node_events_dropped_total", (("subscriber", "slow"),))] == extra
    assert got[("training_node_events_dropped_total", (("subscriber", "keeps-up"),))] == 0
    assert got[("training_node_events_dropped_total", (("subscriber", "other-type"),))] == extra
    assert slow.qsize() == size
