"""Which cloud this node runs on, from local DMI evidence only (the way cloud-init's ds-identify does).

Nothing here touches the network: ``provider = "auto"`` with no evidence means no metadata request is
ever sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent.core.fsread import read_optional
from agent.core.vocabulary import Setting
from agent.preemption import registry

DMI_FILES = ("sys_vendor", "product_name", "chassis_asset_tag", "bios_vendor", "bios_version")


@dataclass(frozen=True, slots=True)
class Dmi:
    sys_vendor: str = ""
    product_name: str = ""
    chassis_asset_tag: str = ""
    bios_vendor: str = ""
    bios_version: str = ""


@dataclass(frozen=True, slots=True)
class DmiRule:
    """One DMI string that says "this cloud": ``field`` is ``value`` exactly (``is``), starts with it
    (``starts``) or holds it in any case (``holds``)."""

    field: str  # one of DMI_FILES
    value: str
    how: Literal["is", "starts", "holds"] = "is"

    def __post_init__(self) -> None:
        if self.field not in DMI_FILES:
            raise ValueError(f"no DMI file {self.field!r}; one of {', '.join(DMI_FILES)}")

    def matches(self, dmi: Dmi) -> bool:
        seen: str = getattr(dmi, self.field)
        if self.how == "starts":
            return seen.startswith(self.value)
        if self.how == "holds":
            return self.value.lower() in seen.lower()
        return seen == self.value


def evidence(dmi: Dmi, rules: tuple[DmiRule, ...]) -> str:
    """``DMI sys_vendor='Google' product_name='Google Compute Engine'``: every file the rules read."""
    files = dict.fromkeys(rule.field for rule in rules)
    return "DMI " + " ".join(f"{name}={getattr(dmi, name)!r}" for name in files)


@dataclass(frozen=True, slots=True)
class Detection:
    provider: str  # a declared cloud's name, or Setting.NONE
    evidence: str  # human words: which file said what


def read_dmi(sysfs: str | Path) -> Dmi:
    """The DMI strings under ``<sysfs>/class/dmi/id``; a missing or unreadable file reads as ''."""
    base = Path(sysfs) / "class" / "dmi" / "id"
    return Dmi(**{name: (read_optional(base / name, limit=4096) or "").strip() for name in DMI_FILES})


def classify(dmi: Dmi) -> Detection:
    """Pure: DMI strings -> the cloud, with the evidence that decided it. The clouds are tried in
    their declared order; the first whose rules match wins."""
    for spec in registry.clouds():
        if any(rule.matches(dmi) for rule in spec.dmi):
            return Detection(spec.name, evidence(dmi, spec.dmi))
    vendor, product, tag = dmi.sys_vendor, dmi.product_name, dmi.chassis_asset_tag
    if not any((vendor, product, tag)):
        return Detection(Setting.NONE, "no DMI information (class/dmi/id absent or empty)")
    return Detection(
        Setting.NONE, f"DMI sys_vendor={vendor!r} product_name={product!r} matches no supported cloud"
    )


def detect(sysfs: str | Path) -> Detection:
    return classify(read_dmi(sysfs))
