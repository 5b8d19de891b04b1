"""[storage]: block devices and NFS mounts."""

from __future__ import annotations

from pydantic import Field

from agent.config.types import StrictModel


class StorageSection(StrictModel):
    enabled: bool = True
    # node_exporter's default ignore list for diskstats, plus device-mapper, loop and ram disks
    device_exclude: str = Field(
        r"^(z?ram|loop|fd|dm-|sr|(h|s|v|xv)d[a-z]+\d+|nvme\d+n\d+p\d+|md\d+p\d+|mmcblk\d+p\d+)",
        description="regex over device names that are skipped",
    )
