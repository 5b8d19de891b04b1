"""The instance catalog (``catalog.toml``, shipped in the package) as typed rows, and the user's rows
laid over it ([advice] cards and instances). Every row carries where its figures came from and when
they were read; a row a user adds says ``your config`` unless it names a source of its own.

A bad row is refused with its name and field: ``instance "ecs.gn8is.4xlarge": gpus: Input should be
greater than 0``."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

Rdma = Literal["none", "erdma", "efa", "infiniband", "roce", "tcpx"]
YOUR_CONFIG = "your config"


class CatalogRow(BaseModel):
    """A catalog row: unknown keys are errors, as in the config (which reads these rows too, so this
    module imports nothing of it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class CatalogError(ValueError):
    """A row the catalog or the config cannot use; the message names the row and the field."""


class Card(CatalogRow):
    """One GPU model: dense BF16/FP16 tensor TFLOPS (without sparsity), memory bandwidth, memory."""

    nvml_names: tuple[str, ...] = ()  # what NVML calls it (exactly), so the node's GPUs are recognised
    tensor_tflops: float = Field(gt=0)
    bandwidth_gbs: float = Field(gt=0)
    memory_gb: float = Field(gt=0)
    source: str = YOUR_CONFIG
    read: str = ""
    source_note: str = ""


class Size(CatalogRow):
    """One size of a family; what it leaves out comes from the family."""

    id: str = Field(min_length=1)
    gpus: int = Field(gt=0)
    vcpus: int = Field(gt=0)
    memory_gib: float = Field(gt=0)
    network_gbps: float = Field(gt=0)
    nvlink: bool | None = None
    rdma: Rdma | None = None
    card: str | None = None


class Family(CatalogRow):
    cloud: str = Field(min_length=1)
    card: str = Field(min_length=1)
    nvlink: bool
    rdma: Rdma
    source: str = Field(min_length=1)
    read: str = Field(min_length=1)
    source_note: str = ""
    sizes: tuple[Size, ...] = Field(min_length=1)


class Instance(CatalogRow):
    """One instance type as the advice reads it: a family's size with the family's figures. In the
    config the row's name is its id."""

    id: str = ""
    cloud: str = Field(min_length=1)
    family: str = ""
    card: str = Field(min_length=1)
    gpus: int = Field(gt=0)
    nvlink: bool = False
    network_gbps: float = Field(gt=0)
    rdma: Rdma = "none"
    vcpus: int = Field(gt=0)
    memory_gib: float = Field(gt=0)
    source: str = YOUR_CONFIG
    read: str = ""
    source_note: str = ""


@dataclass(frozen=True, slots=True)
class Catalog:
    cards: Mapping[str, Card]
    instances: Mapping[str, Instance]

    def card_of(self, inst: Instance) -> Card:
        return self.cards[inst.card]

    def card_named(self, nvml_name: str) -> str | None:
        """The card NVML's name is, by the rows' exact names; None for a GPU the catalog lacks."""
        for key, card in self.cards.items():
            if nvml_name in card.nvml_names:
                return key
        return None


def _problem(what: str, name: str, e: ValidationError) -> CatalogError:
    first = e.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "row"
    return CatalogError(f'{what} "{name}": {field}: {first["msg"]}')


def parse(data: Mapping[str, Any]) -> Catalog:
    """The catalog's TOML (as a dict) to rows; CatalogError names the first bad one."""
    cards: dict[str, Card] = {}
    for name, row in (data.get("cards") or {}).items():
        try:
            cards[name] = Card.model_validate(row)
        except ValidationError as e:
            raise _problem("card", name, e) from None
    instances: dict[str, Instance] = {}
    for fam_name, row in (data.get("families") or {}).items():
        try:
            fam = Family.model_validate(row)
        except ValidationError as e:
            raise _problem("family", fam_name, e) from None
        for size in fam.sizes:
            instances[size.id] = Instance(
                id=size.id,
                cloud=fam.cloud,
                family=fam_name,
                card=size.card or fam.card,
                gpus=size.gpus,
                nvlink=fam.nvlink if size.nvlink is None else size.nvlink,
                network_gbps=size.network_gbps,
                rdma=size.rdma or fam.rdma,
                vcpus=size.vcpus,
                memory_gib=size.memory_gib,
                source=fam.source,
                read=fam.read,
                source_note=fam.source_note,
            )
    out = Catalog(cards, instances)
    check(out)
    return out


def check(cat: Catalog) -> None:
    """Every instance names a card the catalog has."""
    for inst in cat.instances.values():
        if inst.card not in cat.cards:
            known = ", ".join(sorted(cat.cards))
            raise CatalogError(
                f'instance "{inst.id}": card: "{inst.card}" is no card of the catalog ({known})'
            )


@lru_cache(maxsize=1)
def shipped() -> Catalog:
    """The catalog that ships with the agent (read once)."""
    text = resources.files("agent.advice").joinpath("catalog.toml").read_text(encoding="utf-8")
    return parse(tomllib.loads(text))


def merged(base: Catalog, cards: Mapping[str, Card], instances: Mapping[str, Instance]) -> Catalog:
    """The user's rows over the catalog's: a row of the same name replaces the shipped one whole."""
    out = Catalog(
        {**base.cards, **cards},
        {**base.instances, **{k: v.model_copy(update={"id": k}) for k, v in instances.items()}},
    )
    check(out)
    return out
