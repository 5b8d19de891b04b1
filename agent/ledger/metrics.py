"""The goodput ledger's /metrics families: GPU-seconds and money per bucket (settled counters, open
gauges), the goodput ratio, the market and the price, and the checkpoint cadence it measured."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.ledger.assign import BUCKETS
from agent.ledger.cadence import Advice
from agent.ledger.state import Ledger


class LedgerFigures(Protocol):
    """What the families read of the goodput ledger: typed here, not as the component, so that this
    face does not import the module that imports it."""

    @property
    def ledger(self) -> Ledger: ...

    @property
    def market(self) -> str: ...

    @property
    def priced(self) -> bool: ...

    @property
    def currency(self) -> str: ...

    def prices(self) -> tuple[float | None, float | None]: ...

    def goodput_ratio(self, now: float) -> float | None: ...  # over [goodput] window

    def advice(self, now: float) -> Advice | None: ...


def families(comp: LedgerFigures, now: float) -> Iterable[Metric]:
    led = comp.ledger
    unsettled, unsettled_cost = led.book.unsettled()
    total = CounterMetricFamily(
        "training_node_gpu_seconds",
        "GPU-seconds per ledger bucket, settled (each second in exactly one bucket); the newest are"
        " in training_node_gpu_seconds_unsettled until they settle.",
        labels=["bucket"],
    )
    open_ = GaugeMetricFamily(
        "training_node_gpu_seconds_unsettled",
        "GPU-seconds per bucket still open to late facts (periodic saves, work lost at a reclaim).",
        labels=["bucket"],
    )
    for b, v, u in zip(BUCKETS, led.book.seconds, unsettled, strict=True):
        total.add_metric([b], v)
        open_.add_metric([b], u)
    yield total
    yield open_
    ratio = comp.goodput_ratio(now)
    if ratio is not None:
        yield GaugeMetricFamily(
            "training_node_goodput_ratio",
            "Productive share of the GPU-seconds over [goodput] window.",
            value=ratio,
        )
    if comp.priced:
        cur = comp.currency
        cost = CounterMetricFamily(
            "training_node_cost", "Money per ledger bucket, settled.", labels=["bucket", "currency"]
        )
        cost_open = GaugeMetricFamily(
            "training_node_cost_unsettled",
            "Money per bucket not settled yet.",
            labels=["bucket", "currency"],
        )
        for b, v, u in zip(BUCKETS, led.book.cost, unsettled_cost, strict=True):
            cost.add_metric([b, cur], v)
            cost_open.add_metric([b, cur], u)
        yield cost
        yield cost_open
        saving = CounterMetricFamily(
            "training_node_cost_spot_saving",
            "Money saved by running on spot, against this instance type's on-demand price.",
            labels=["currency"],
        )
        saving.add_metric([cur], led.saving)
        yield saving
        hourly, _ = comp.prices()
        if hourly:
            price = GaugeMetricFamily(
                "training_node_instance_hour_price",
                "Price in force per instance-hour.",
                labels=["currency"],
            )
            price.add_metric([cur], hourly)
            yield price
    market = GaugeMetricFamily(
        "training_node_market", "The node's market: spot or on-demand.", labels=["market"]
    )
    market.add_metric([comp.market], 1.0)
    yield market
    yield from _checkpoint(comp, now)


def _checkpoint(comp: LedgerFigures, now: float) -> Iterable[Metric]:
    led = comp.ledger
    c = CounterMetricFamily("training_node_interruptions", "Spot reclaims and stop/terminate notices seen.")
    c.add_metric([], float(led.interruptions))
    yield c
    o = CounterMetricFamily("training_node_ledger_observed_seconds", "Wall-clock seconds the ledger booked.")
    o.add_metric([], led.observed)
    yield o
    if led.last_durable is not None:
        yield GaugeMetricFamily(
            "training_node_checkpoint_last_durable_timestamp_seconds",
            "When the trainer's last checkpoint became durable (periodic or final).",
            value=led.last_durable,
        )
    cost, _ = led.checkpoint_cost()
    if cost is not None:
        yield GaugeMetricFamily(
            "training_node_checkpoint_save_seconds", "How long a checkpoint takes (median).", value=cost
        )
    interval = led.interval(now)
    if interval is not None:
        yield GaugeMetricFamily(
            "training_node_checkpoint_interval_seconds",
            "How often the job checkpoints: its usual gap, or the time since the last one if longer.",
            value=interval,
        )
    advice = comp.advice(now)
    if advice is not None:
        yield GaugeMetricFamily(
            "training_node_checkpoint_advised_interval_seconds",
            "The Young/Daly checkpoint interval sqrt(2 x checkpoint time x MTBI).",
            value=advice.interval_seconds,
        )
