"""What the classifier publishes for the other parts (today the goodput ledger): how one GPU sample's
time divides by what it has learned (working, spinning, starved; or down), the pressures of its
latest window, and its hints' words. A reader holds a :class:`Published` from the classifier part's
``published()``, never its engine, baselines or features; :func:`unclassified` stands in where the
classifier is off (nothing learned, no window)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.classifier.baselines import Baselines
from agent.classifier.features import Features
from agent.classifier.gpus import GpuClass, GpuReading, Shares, gpu_class, gpu_shares
from agent.classifier.hints import HINTS
from agent.classifier.shapes import SHAPES
from agent.classifier.shapes.shape import SaveCost, SaveView
from agent.config.classifier import ClassifierSection
from agent.core.vocabulary import Bucket, HostSubReason

__all__ = [
    "HINTS",
    "NO_PRESSURES",
    "SHAPES",
    "GpuClass",
    "GpuReading",
    "Pressures",
    "Published",
    "SaveCost",
    "SaveView",
    "Shares",
    "published",
    "unclassified",
]


@dataclass(frozen=True, slots=True)
class Pressures:
    """The classifier's pressures (0-1) in its latest window; all 0 before its first evaluation."""

    storage: float = 0.0
    cpu: float = 0.0
    network: float = 0.0  # while the GPUs wait
    network_spin: float = 0.0  # while they spin
    network_input: float = 0.0  # input streamed over the NIC while they starve (data/network-input)
    # the host shapes' pressures (agent/classifier/shapes), by the bucket each books to: what explains
    # the spinning (launch overhead with no collective) and the starved time (saves, pageable copies)
    host_spin: tuple[tuple[Bucket, float], ...] = ()
    host_starved: tuple[tuple[Bucket, float], ...] = ()


NO_PRESSURES = Pressures()


class Published:
    """The classifier's results as they stand: ``gpu_shares`` and ``gpu_class`` of a sample,
    ``pressures`` of the window."""

    __slots__ = ("_baselines", "_cfg", "pressures")

    def __init__(self, pressures: Pressures, baselines: Baselines, cfg: ClassifierSection) -> None:
        self.pressures = pressures
        self._baselines = baselines
        self._cfg = cfg

    def gpu_class(self, g: GpuReading) -> GpuClass:
        """The classifier's sorting of one GPU sample (``agent.classifier.gpus.gpu_class``)."""
        return gpu_class(g, self._baselines, self._cfg)

    def gpu_shares(self, g: GpuReading) -> Shares | None:
        """How one GPU sample's time divides (``agent.classifier.gpus.gpu_shares``); None: down."""
        return gpu_shares(g, self._baselines, self._cfg)


def pressures(f: Features | None) -> Pressures:
    if f is None:
        return NO_PRESSURES
    spin: list[tuple[Bucket, float]] = []
    starved: list[tuple[Bucket, float]] = []
    for k, p in f.host_pressures:
        sh = SHAPES[HostSubReason(k)]
        if p > 0 and sh.by_pressure(f):  # the others the ledger books from the trainer's spans
            (spin if sh.explains == "spinning" else starved).append((sh.bucket, p))
    if f.trainers == 0:
        spin, starved = [], []  # no training process: nothing of its own holds the GPUs (as scores.score)
    return Pressures(
        f.storage_pressure,
        f.cpu_pressure,
        f.network_pressure,
        f.network_pressure_spin,
        f.input_pressure,
        tuple(spin),
        tuple(starved),
    )


def published(baselines: Baselines, features: Features | None, cfg: ClassifierSection) -> Published:
    return Published(pressures(features), baselines, cfg)


def unclassified(cfg: ClassifierSection) -> Published:
    """No classifier: nothing learned (the configured idle power), no pressures."""
    return Published(NO_PRESSURES, Baselines(), cfg)
