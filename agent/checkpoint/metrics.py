"""The checkpoint action's families: requests, outcomes and the request-to-ack duration, split by
``drill``, and gauges over the current targets."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

DURATION_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
DRILL = ("false", "true")


class CheckpointMetrics:
    """Counters and the duration histogram; both ``drill`` values are exported from the start."""

    def __init__(self) -> None:
        # registry=None: the component hands these to the daemon's registry through metrics()
        self.requests = Counter(
            "training_node_checkpoint_requests",
            "Checkpoint requests sent to the training processes.",
            ["drill"],
            registry=None,
        )
        self.completed = Counter(
            "training_node_checkpoint_completed",
            "Checkpoints acknowledged before the deadline.",
            ["drill"],
            registry=None,
        )
        self.missed = Counter(
            "training_node_checkpoint_deadline_missed",
            "Checkpoint requests with no ack before the deadline.",
            ["drill"],
            registry=None,
        )
        self.duration = Histogram(
            "training_node_checkpoint_duration_seconds",
            "Time from the checkpoint request to the trainer's ack.",
            ["drill"],
            buckets=DURATION_BUCKETS,
            registry=None,
        )
        for d in DRILL:
            for m in (self.requests, self.completed, self.missed, self.duration):
                m.labels(d)
        # the families change only when a checkpoint does (rarely): collected once per change, not
        # per scrape (prometheus_client's collect() builds every sample anew)
        self._version = 0
        self._collected: tuple[int, list[Metric]] = (-1, [])

    @staticmethod
    def _drill(drill: bool) -> str:
        return "true" if drill else "false"

    def requested(self, drill: bool) -> None:
        self.requests.labels(self._drill(drill)).inc()
        self._version += 1

    def acknowledged(self, drill: bool, seconds: float) -> None:
        self.completed.labels(self._drill(drill)).inc()
        self.duration.labels(self._drill(drill)).observe(seconds)
        self._version += 1

    def deadline_missed(self, drill: bool) -> None:
        self.missed.labels(self._drill(drill)).inc()
        self._version += 1

    def _counted(self) -> list[Metric]:
        version, families = self._collected
        if version != self._version:
            version, families = self._version, []
            for m in (self.requests, self.completed, self.missed, self.duration):
                for fam in m.collect():
                    # the exposition has no *_created series anywhere else; keep it that way
                    fam.samples = [s for s in fam.samples if not s.name.endswith("_created")]
                    families.append(fam)
            self._collected = (version, families)
        return families

    def families(self, targets: int, unsignalable: int, in_progress: int) -> Iterable[Metric]:
        yield from self._counted()
        yield GaugeMetricFamily(
            "training_node_checkpoint_targets",
            "Training processes found by [trainer] discover.",
            value=targets,
        )
        yield GaugeMetricFamily(
            "training_node_checkpoint_targets_unsignalable",
            "Targets the configured signal would kill (no handler) or that ignore it.",
            value=unsignalable,
        )
        yield GaugeMetricFamily(
            "training_node_checkpoint_in_progress",
            "Checkpoint requests waiting for their ack.",
            value=in_progress,
        )
