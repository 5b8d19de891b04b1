"""What to do about a verdict, in the words of the people who run training jobs."""

from __future__ import annotations

from agent.classifier.features import Features
from agent.core.vocabulary import DataSubReason, Verdict

HINTS = {
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
        "Input is CPU-bound: raise DataLoader num_workers (up to the allowed cores), set "
        "pin_memory=True and persistent_workers=True, move decoding and augmentation off the hot path "
        "(pre-decode offline, or decode on the GPU with DALI/nvJPEG); check the container's CPU quota."
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


def hint(verdict: str, sub_reason: str | None, f: Features) -> str:
    if verdict == Verdict.DATA:
        return HINTS[f"data/{sub_reason or DataSubReason.STORAGE}"]
    if verdict == Verdict.IDLE and f.trainers:
        return HINTS["idle/stalled"]
    return HINTS.get(verdict, "")
