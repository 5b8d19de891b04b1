"""Which cloud this node runs on, from local DMI evidence only (the way cloud-init's ds-identify does).

Nothing here touches the network: ``provider = "auto"`` with no evidence means no metadata request is
ever sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.core.fsread import read_optional
from agent.core.vocabulary import Cloud, Setting

DMI_FILES = ("sys_vendor", "product_name", "chassis_asset_tag", "bios_vendor", "bios_version")
AZURE_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77"


@dataclass(frozen=True, slots=True)
class Dmi:
    sys_vendor: str = ""
    product_name: str = ""
    chassis_asset_tag: str = ""
    bios_vendor: str = ""
    bios_version: str = ""


@dataclass(frozen=True, slots=True)
class Detection:
    provider: Cloud | Setting  # a cloud, or none
    evidence: str  # human words: which file said what


def read_dmi(sysfs: str | Path) -> Dmi:
    """The DMI strings under ``<sysfs>/class/dmi/id``; a missing or unreadable file reads as ''."""
    base = Path(sysfs) / "class" / "dmi" / "id"
    return Dmi(**{name: (read_optional(base / name, limit=4096) or "").strip() for name in DMI_FILES})


def classify(dmi: Dmi) -> Detection:
    """Pure: DMI strings -> the cloud, with the evidence that decided it."""
    vendor, product, tag = dmi.sys_vendor, dmi.product_name, dmi.chassis_asset_tag
    if vendor == "Alibaba Cloud" or product.startswith("Alibaba Cloud"):
        return Detection(Cloud.ALIBABA, f"DMI sys_vendor={vendor!r} product_name={product!r}")
    if vendor == "Amazon EC2" or "amazon" in dmi.bios_version.lower():
        return Detection(Cloud.AWS, f"DMI sys_vendor={vendor!r} bios_version={dmi.bios_version!r}")
    if vendor == "Google" or product == "Google Compute Engine":
        return Detection(Cloud.GCP, f"DMI sys_vendor={vendor!r} product_name={product!r}")
    # Hyper-V anywhere says "Microsoft Corporation"; only Azure sets this asset tag
    if tag == AZURE_ASSET_TAG:
        return Detection(Cloud.AZURE, f"DMI chassis_asset_tag={tag!r}")
    if vendor.startswith("Tencent Cloud") or product.startswith("Tencent Cloud"):
        return Detection(Cloud.TENCENT, f"DMI sys_vendor={vendor!r} product_name={product!r}")
    if not any((vendor, product, tag)):
        return Detection(Setting.NONE, "no DMI information (class/dmi/id absent or empty)")
    return Detection(
        Setting.NONE, f"DMI sys_vendor={vendor!r} product_name={product!r} matches no supported cloud"
    )


def detect(sysfs: str | Path) -> Detection:
    return classify(read_dmi(sysfs))
