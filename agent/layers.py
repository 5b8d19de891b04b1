"""The agent's layers, bottom first: a module imports from its own layer and the ones below only,
``TYPE_CHECKING`` imports and imports inside functions included (tests/test_layers.py reads every
import of agent/). What every part is built from sits at the bottom, the wiring at the top; the data
path reads upwards: sources -> snapshot -> the parts -> the exporter.

A room is ``agent.<room>``: a package or a top-level module.
"""

from __future__ import annotations

LAYERS: tuple[tuple[str, ...], ...] = (
    ("core", "layers"),  # events and the bus, the vocabulary, backoff, files, logging; this table
    ("agent", "trainer"),  # the package's face (its version); the old trainer import (tna_client's)
    ("snapshot",),  # the node's picture: plain data, naming no source
    ("config",),  # the typed config tree
    ("sources",),  # one folder per source: collector, parsers, part, rates, metrics, status
    ("context",),  # what each part is built with
    ("classifier", "faults", "fleet", "scheduler", "preemption"),  # parts that import no other part
    ("ledger",),  # reads the classifier's published results (classifier/published.py)
    ("steps",),  # hands the trainers' step figures to the ledger
    ("advice",),  # reads the ledger's buckets and the GPUs' figures: which instance to rent next time
    ("alerts", "checkpoint"),  # name clouds by their declarations (preemption/registry.py)
    ("report",),  # the run as a picture: the timeline it keeps and the page (pure) it makes
    ("exporter",),  # /metrics, the status face, TLS and auth
    ("runtime",),  # the wiring: the sampler, the daemon, what a config builds
    ("devtools",),  # the simulators, the fake NVML's writer, the demo's tour
    ("cli", "__main__"),  # the training-node-agent command
)

# Imports against the order, each with why: (importing module, imported module) -> reason
AGAINST_THE_ORDER: dict[tuple[str, str], str] = {
    ("agent.config.alerts", "agent.alerts.services"): (
        "a webhook's type is checked against the declared chat services when the config is read, so a"
        " typo is refused at load and at reload naming the types; the declarations live with the services"
    ),
    ("agent.config.advice", "agent.advice.catalog"): (
        "[advice] cards and instances are checked against the shipped catalog when the config is read,"
        " so a row naming an unknown card is refused at load and at reload, naming the row and field"
    ),
    ("agent.config.preemption", "agent.preemption.registry"): (
        "[preemption] provider is checked against the declared clouds when the config is read"
    ),
    ("agent.config.scheduler", "agent.scheduler.backend"): (
        "[scheduler] kind is checked against the declared scheduler backends when the config is read"
    ),
}


def room(module: str) -> str:
    """``agent.sources.gpu.part`` -> ``sources``; ``agent`` -> ``agent``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(module: str) -> int:
    """The layer of an agent module; a KeyError names a room the table lacks."""
    name = room(module)
    for i, rooms in enumerate(LAYERS):
        if name in rooms:
            return i
    raise KeyError(f"room {name!r} ({module}) is in no layer of agent/layers.py")
