"""Which cloud this node runs on, from local DMI evidence only (the way cloud-init's ds-identify does).

Nothing here touches the network: ``provider = "auto"`` with no evidence means no metadata request is
ever sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.core.vocabulary import Setting
from agent.preemption import registry
from agent.preemption.dmi import Dmi, evidence, read_dmi


@dataclass(frozen=True, slots=True)
class Detection:
    provider: str  # a declared cloud's name, or Setting.NONE
    evidence: str  # human words: which file said what


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
