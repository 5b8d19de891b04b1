"""Which catalog row this node is (pure): the instance type the metadata service gave, checked
against the GPUs NVML names; without it (a bare node, ``make run``) or where the two disagree, from
the GPUs' name and count and the host's vCPUs and memory."""

from __future__ import annotations

from collections.abc import Sequence

from agent.advice.catalog import Catalog, Instance
from agent.advice.estimate import ThisNode

METADATA = "metadata"
NVML_HOST = "nvml+host"  # a catalog row whose card, GPUs, vCPUs and memory match the node's
NVML = "nvml"  # no row matches: the node as NVML and the host show it, its network unknown
MEMORY_SLACK = 0.1  # a guest sees a little less memory than the type's figure


def _node(inst: Instance, source: str) -> ThisNode:
    return ThisNode(
        inst.id,
        inst.cloud,
        inst.card,
        inst.gpus,
        inst.vcpus,
        inst.nvlink,
        inst.network_gbps,
        inst.rdma,
        source,
    )


def recognise(
    catalog: Catalog,
    instance_type: str | None,
    cloud: str | None,
    gpu_names: Sequence[str],
    vcpus: int,
    memory_bytes: int | None,
) -> tuple[ThisNode | None, list[str]]:
    """The node, and what the recognition rests on (for the advice's assumptions)."""
    notes: list[str] = []
    card = catalog.card_named(gpu_names[0]) if gpu_names else None
    row = catalog.instances.get(instance_type or "")
    if row is not None:
        if not gpu_names or (card == row.card and len(gpu_names) == row.gpus):
            return _node(row, METADATA), notes
        seen = f"{len(gpu_names)}x {gpu_names[0]}"
        notes.append(
            f"the metadata says {row.id} ({row.gpus}x {row.card}) but NVML shows {seen}: NVML is taken"
        )
    elif instance_type:
        notes.append(f"{instance_type} is not in the catalog: add it under [advice.instances]")
    if not gpu_names:
        return None, [*notes, "no GPUs seen"]
    if card is None:
        return None, [*notes, f'"{gpu_names[0]}" is no card of the catalog: add it under [advice.cards]']
    gib = memory_bytes / 2**30 if memory_bytes else None
    for inst in sorted(catalog.instances.values(), key=lambda i: i.id):
        if inst.card != card or inst.gpus != len(gpu_names) or inst.vcpus != vcpus:
            continue
        if gib is None or abs(gib - inst.memory_gib) <= MEMORY_SLACK * inst.memory_gib:
            notes.append(f"recognised as {inst.id} from its GPUs, vCPUs and memory")
            return _node(inst, NVML_HOST), notes
    notes.append(
        f"this node's network is not known (no catalog row has {len(gpu_names)}x {card} and {vcpus} vCPUs)"
    )
    return ThisNode(f"{len(gpu_names)}x {card}", cloud, card, len(gpu_names), vcpus, source=NVML), notes
