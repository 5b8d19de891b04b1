"""[advice]: which instance to rent next time (docs/advice.md). The shipped catalog
(agent/advice/catalog.toml) is the base; rows here add to it or replace a row of the same name whole,
and prices here are the user's own. A bad row is refused naming the row and the field."""

from __future__ import annotations

from pydantic import Field, model_validator

from agent.advice.catalog import Card, Instance, merged, shipped
from agent.config.types import StrictModel


class AdviceSection(StrictModel):
    enabled: bool = True
    headroom: float = Field(
        0.1, ge=0, lt=1, description="GPU memory a candidate must keep free above the job's peak (a share)"
    )
    clouds: tuple[str, ...] = Field(
        (), description="candidate clouds; empty: this node's cloud where known, else every cloud"
    )
    prices: dict[str, float] = Field(
        default_factory=dict,
        description="your price per instance-hour by instance type, in [cost] currency",
    )
    cards: dict[str, Card] = Field(
        default_factory=dict, description="cards added to the catalog or replacing one"
    )
    instances: dict[str, Instance] = Field(
        default_factory=dict, description="instance types added to the catalog or replacing one"
    )

    @model_validator(mode="after")
    def _rows(self) -> AdviceSection:
        for key, price in self.prices.items():
            if not price > 0:
                raise ValueError(f'prices."{key}": a price per instance-hour must be above 0, got {price!r}')
        merged(shipped(), self.cards, self.instances)  # a row naming a card no one has: CatalogError
        return self
