"""The DMI strings a node's firmware gives (``/sys/class/dmi/id``), and the rules a cloud declares to
say "this is me" by them (pure but for :func:`read_dmi`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent.core.fsread import read_optional

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


def read_dmi(sysfs: str | Path) -> Dmi:
    """The DMI strings under ``<sysfs>/class/dmi/id``; a missing or unreadable file reads as ''."""
    base = Path(sysfs) / "class" / "dmi" / "id"
    return Dmi(**{name: (read_optional(base / name, limit=4096) or "").strip() for name in DMI_FILES})
