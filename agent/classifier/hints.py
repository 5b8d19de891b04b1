"""What to do about a verdict, in the words of the people who run training jobs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from agent.classifier.features import Features
from agent.classifier.shapes import SHAPES
from agent.core.vocabulary import DataSubReason, HostSubReason, Verdict

if TYPE_CHECKING:
    from agent.classifier.reasons import Second

HINTS = {
    "degraded-gpu": (
        "GPU{s} {gpus} set{v} the pace: the job runs at the speed of its slowest GPU. Check its clocks event "
        "reasons, temperature and cooling, its power limit, and its PCIe link and NVLink in "
        "`training-node-agent status`; reseat or replace it, or drain the node and move the job."
    ),
    Verdict.COMPUTE: (
        "Healthy: the GPUs do real work. Further speed comes from the model: mixed precision (bf16/fp8), "
        "fused kernels, torch.compile, larger per-GPU batches."
    ),
    "data/storage": (
        "Input is storage-bound: stage the dataset to local NVMe (or a RAM cache) before training; for "
        "many small files use CPFS instead of NAS, or pack them into shards (WebDataset, TFRecord); on "
        "NFS raise rsize to 1 MiB and nconnect (e.g. nconnect=8); raise DataLoader prefetch_factor."
    ),
    "data/cpu": (
        "Input is CPU-bound and every allowed core is busy: make decoding cheaper (pre-decoded or "
        "pre-resized shards, decoding on the GPU with DALI or nvJPEG), or choose an instance with more "
        "vCPUs per GPU; check the container's CPU quota."
    ),
    "data/cpu+cores": (
        "Input is CPU-bound while {idle} allowed cores are idle: {who}; raise DataLoader num_workers "
        "(try num_workers={suggest}), set persistent_workers=True and pin_memory=True."
    ),
    "data/cpu+sync": (
        "Input is CPU-bound and synchronous: its workers decode only while the GPUs wait; let them run "
        "ahead (a DataLoader with num_workers and prefetch_factor, or imap/map_async over the pool "
        "instead of map){more}."
    ),
    "data/network-input": (
        "Input is streamed over the network and the link is at its ceiling: cache the dataset on local "
        "NVMe (or a RAM cache) after the first epoch; read ahead with more parallel streams and larger "
        "shards (more DataLoader workers, WebDataset/MosaicML Streaming shards of 100 MB or more); keep "
        "the bucket in the node's region, or put CPFS/NFS in front of it; for ossfs, s3fs or JuiceFS "
        "raise their read-ahead and cache."
    ),
    Verdict.NETWORK: (
        "Gradient sync is network-bound: use eRDMA/RDMA (GPUDirect) instead of TCP; check "
        "NCCL_SOCKET_IFNAME and NCCL_IB_HCA / NCCL_IB_GID_INDEX so NCCL uses the fast NICs; use bigger "
        "gradient buckets (DDP bucket_cap_mb) or gradient accumulation, overlap communication with "
        "compute; or move to an instance family with more network bandwidth."
    ),
    Verdict.SYNC_WAIT: (
        "This node waits for other ranks: find the slow rank (the node whose verdict is data, "
        "network or compute while the others show sync-wait; NCCL_DEBUG=INFO, per-rank step times); "
        "check it for throttled or faulty GPUs and for uneven data shards."
    ),
    Verdict.IDLE: "No training work on this node.",
    "idle/stalled": (
        "Training processes are present but nothing is happening: is the job hung (py-spy dump "
        "--pid), waiting on a lock or barrier, or still loading?"
    ),
    Verdict.MIXED: "No single bottleneck stands out; the per-class scores show the contenders.",
}


# idle allowed cores from which more workers are the remedy: on a small box the agent and the job's
# main process take a slice of the core a new worker would get
IDLE_CORES = 0.5


def suggest_workers(f: Features) -> int:
    """A num_workers per training process that would keep up: the decoders' throughput must grow by
    the share of time the GPUs got no batch, within the idle cores."""
    ranks = max(f.cpu_ranks, 1)
    per_rank = f.cpu_workers / ranks
    decoders = max(per_rank, 1.0)  # num_workers=0: the training process is the one decoder
    need = math.ceil(decoders / max(1.0 - f.starved_share, 0.1))
    cap = per_rank + round((f.cpu_idle_cores or 0.0) / ranks)
    return int(max(per_rank + 1, min(need, cap)))


def hint(verdict: str, sub_reason: str | None, f: Features, second: Second | None = None) -> str:
    if verdict == Verdict.COMPUTE and second is not None and not f.slow_gpus:
        # "Healthy" only where nothing costs that much
        return (
            f"The GPUs do real work {f.working_share * 100:.0f}% of the time, but {second.label} costs "
            f"{second.share * 100:.0f}%: " + hint(second.verdict, second.sub_reason, f)
        )
    if verdict == Verdict.HOST and sub_reason in SHAPES:
        return SHAPES[HostSubReason(sub_reason)].hint(f)
    if f.slow_gpus and verdict in (Verdict.COMPUTE, Verdict.SYNC_WAIT):
        which = ", ".join(str(x.gpu) for x in f.slow_gpus)
        many = len(f.slow_gpus) > 1
        return HINTS["degraded-gpu"].format(gpus=which, s="s" if many else "", v="" if many else "s")
    if verdict == Verdict.DATA:
        idle = f.cpu_idle_cores or 0.0
        if sub_reason == DataSubReason.CPU and f.cpu_synchronous and f.cpu_workers > 0:
            more = ""
            if idle >= IDLE_CORES:
                more = f"; {idle:.1f} allowed cores are idle: try num_workers={suggest_workers(f)}"
            return HINTS["data/cpu+sync"].format(more=more)
        if sub_reason == DataSubReason.CPU and idle >= IDLE_CORES:
            who = (
                "the training process decodes every batch itself (num_workers=0)"
                if f.cpu_workers == 0
                else f"{f.cpu_workers // max(f.cpu_ranks, 1)} data-loader workers per process are too few"
            )
            return HINTS["data/cpu+cores"].format(
                idle=f"{f.cpu_idle_cores:.1f}", who=who, suggest=suggest_workers(f)
            )
        return HINTS[f"data/{sub_reason or DataSubReason.STORAGE}"]
    if verdict == Verdict.IDLE and f.trainers:
        return HINTS["idle/stalled"]
    return HINTS.get(verdict, "")
