"""[cost]: what this node's GPU time costs, so the ledger's buckets can be priced.

No price configured (neither ``instance_hour_price`` nor a table entry for this instance type)
means no cost series at all, not zeros.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from agent.config.types import StrictModel, choice_of
from agent.core.vocabulary import Market, Setting

MarketSetting = Annotated[Market | Setting, choice_of((Market.SPOT, Market.ON_DEMAND, Setting.AUTO))]
_CURRENCY = re.compile(r"^[A-Z]{3}$")


class Prices(StrictModel):
    """``[cost.prices."<instance type>"]``: price per instance-hour on each market."""

    spot: float | None = Field(None, gt=0)
    on_demand: float | None = Field(None, gt=0)


class CostSection(StrictModel):
    currency: str = Field("CNY", description="ISO 4217 code, a label on the cost series")
    instance_hour_price: float | None = Field(
        None, gt=0, description="this node's price per instance-hour; overrides the table"
    )
    market: MarketSetting = Field(
        Setting.AUTO, description="auto: spot when the metadata service says so or has sent a spot notice"
    )
    instance_type: str = Field("", description="the table key; empty = what the metadata service says")
    prices: dict[str, Prices] = Field(default_factory=dict)

    @field_validator("currency")
    @classmethod
    def _currency(cls, v: str) -> str:
        if not _CURRENCY.match(v):
            raise ValueError(f'expected a three-letter currency code like "CNY" or "USD", got {v!r}')
        return v

    @property
    def enabled(self) -> bool:
        return self.instance_hour_price is not None or bool(self.prices)


def hourly_price(
    cost: CostSection, instance_type: str | None, market: str
) -> tuple[float | None, float | None]:
    """(price per instance-hour on ``market``, the on-demand price) for this node; None where unknown."""
    row = cost.prices.get(cost.instance_type or instance_type or "")
    on_demand = row.on_demand if row else None
    if cost.instance_hour_price is not None:
        return cost.instance_hour_price, on_demand
    if row is None:
        return None, None
    return (row.spot if market == Market.SPOT else row.on_demand), on_demand
