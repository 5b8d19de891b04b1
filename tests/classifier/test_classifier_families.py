"""The classifier's families and capacity kinds are declared once (agent/classifier/families.py): this
walks the declaration and names each consumer that lacks a piece of it, so a judged counter added in
one place and not another fails here, by name, instead of shifting or dropping a verdict's input."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path
from typing import get_type_hints

from agent.classifier import families, reasons
from agent.classifier.baselines import PARTS, PEAK_FAMILIES, Baselines
from agent.classifier.families import CAPACITIES, FAMILIES, Capacity
from agent.classifier.running import RunningSums
from agent.classifier.samples import Sample, Series
from agent.config.classifier import ClassifierSection
from agent.sources import registry

CLASSIFIER = Path(families.__file__).parent
# where a family is made or kept, not judged
_PLUMBING = {"families.py", "samples.py", "running.py", "gathering.py"}


def _read_attributes() -> dict[str, set[str]]:
    """Module -> the attribute names it reads (``means.nic``, ``attrgetter("nic")`` counts too)."""
    out: dict[str, set[str]] = {}
    for path in sorted(CLASSIFIER.glob("*.py")):
        if path.name in _PLUMBING:
            continue
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
        out[path.name] = names
    return out


def missing(names: Iterable[str], capacities: Iterable[Capacity]) -> list[str]:
    """What each consumer lacks for these families and capacity kinds, one line per piece."""
    names = tuple(names)
    out = []
    judged = {n for attrs in _read_attributes().values() for n in attrs}
    sample_fields = get_type_hints(Sample)
    capacity_families = {c.family for c in capacities}
    for name in names:
        if name not in sample_fields:
            out.append(f"family {name}: classifier/samples.py Sample has no field {name}")
        elif sample_fields[name] is not Series:
            out.append(f"family {name}: Sample.{name} is {sample_fields[name]}, not a Series")
        if name not in judged and name not in capacity_families:
            out.append(f"family {name}: no judge in agent/classifier reads it (features.py, loads.py, ...)")
    status_keys = {k for s in registry.sources() for k in s.tcp_view}
    cfg = ClassifierSection()
    for c in capacities:
        if c.family not in names:
            out.append(f"capacity {c.kind}: its family {c.family} is not in FamilyMeans")
        if c.links is not None and c.links not in sample_fields:
            out.append(f"capacity {c.kind}: Sample has no field {c.links} (its link speeds)")
        if not hasattr(cfg, f"{c.kind}_capacity"):
            out.append(f"capacity {c.kind}: config/classifier.py has no {c.kind}_capacity")
        if c.kind not in Baselines().peaks or c.kind not in PARTS or PEAK_FAMILIES.get(c.kind) != c.family:
            out.append(f"capacity {c.kind}: classifier/baselines.py learns no peak for it")
        if c.kind not in reasons._KIND:
            out.append(f"capacity {c.kind}: classifier/reasons.py cannot name it")
        if c.status_key not in status_keys:
            out.append(
                f"capacity {c.kind}: no source's status has {c.status_key!r} (cli/toppanels.py reads it)"
            )
    return out


def test_every_family_and_capacity_kind_has_each_piece():
    assert missing(FAMILIES, CAPACITIES) == []


def test_a_family_declared_alone_is_named_with_what_it_lacks():
    toy = Capacity("gpu_pcie", "gpu_pcie", "network", "PCIe", "gpus_pcie", links="pcie_speed")
    assert missing((*FAMILIES, "gpu_pcie"), (*CAPACITIES, toy)) == [
        "family gpu_pcie: classifier/samples.py Sample has no field gpu_pcie",
        "capacity gpu_pcie: Sample has no field pcie_speed (its link speeds)",
        "capacity gpu_pcie: config/classifier.py has no gpu_pcie_capacity",
        "capacity gpu_pcie: classifier/baselines.py learns no peak for it",
        "capacity gpu_pcie: classifier/reasons.py cannot name it",
        "capacity gpu_pcie: no source's status has 'gpus_pcie' (cli/toppanels.py reads it)",
    ]
    # a family that is no capacity is judged only where a judge reads it by name
    assert missing(("gpu_pcie",), ()) == [
        "family gpu_pcie: classifier/samples.py Sample has no field gpu_pcie",
        "family gpu_pcie: no judge in agent/classifier reads it (features.py, loads.py, ...)",
    ]


def test_the_running_sums_give_every_family_by_name():
    sums = RunningSums()
    sample = Sample(
        0.0,
        0.0,
        (),
        None,
        **{n: Series(("a",), (float(i),)) for i, n in enumerate(FAMILIES)},
        iowait=None,
        psi_io=None,
        nic_speed={},
        rdma_rate={},
    )
    sums.append(sample)
    means = sums.means(1)
    assert means is not None
    assert {n: getattr(means, n) for n in FAMILIES} == {n: {"a": float(i)} for i, n in enumerate(FAMILIES)}
