"""What a synchronous save the classifier measured (``host/checkpoint``) costs at the node's price,
and how often the reclaim risk says a save that long should be made: the classifier part's
``SaveView`` (agent/classifier/shapes/shape.py), handed over by the daemon."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.classifier.published import SaveCost, SaveView
from agent.ledger.cadence import advise

if TYPE_CHECKING:
    from agent.ledger.component import LedgerComponent


def save_cost(
    hourly: float | None,
    currency: str,
    mtbi: tuple[float | None, str],
    sparse_factor: float,
    seconds: float,
    share: float,
    period: float | None,
) -> SaveCost:
    """The saves hold the whole node's GPUs ``share`` of the time: that share of its hourly price.
    The interval is Young/Daly's for a save of ``seconds`` at the node's interruption rate."""
    rate, source = mtbi
    current = period + seconds if period else None
    advice = advise(seconds, "the classifier's measured saves", rate, source, current, sparse_factor)
    return SaveCost(
        per_hour=hourly * share if hourly is not None else None,
        currency=currency,
        interval=advice.interval_seconds if advice else None,
        mtbi=rate,
        mtbi_source=source,
    )


def save_view(ledger: LedgerComponent) -> SaveView:
    """The ledger part's prices and interruption rate, read when the classifier asks."""

    def view(seconds: float, share: float, period: float | None) -> SaveCost:
        hourly, _ = ledger.prices()
        mtbi = ledger.ledger.mtbi(ledger.cfg.mtbi)
        return save_cost(hourly, ledger.currency, mtbi, ledger.cfg.sparse_factor, seconds, share, period)

    return view
