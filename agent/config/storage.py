"""[storage]: block devices and NFS mounts."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from agent.config.types import StrictModel


def check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as e:
        raise ValueError(f"not a valid regular expression: {e}") from None
    return value


class StorageSection(StrictModel):
    enabled: bool = True
    # node_exporter's default ignore list for diskstats, plus device-mapper, loop and ram disks
    device_exclude: str = Field(
        r"^(z?ram|loop|fd|dm-|sr|(h|s|v|xv)d[a-z]+\d+|nvme\d+n\d+p\d+|md\d+p\d+|mmcblk\d+p\d+)",
        description="regex over device names that are skipped",
    )
    # whose mount namespace's NFS mounts are read: <procfs>/<this>/mountstats. "self" is the agent's
    # own; an agent in a container (with the host's pid namespace) sets "1" to see the host's mounts
    mountstats_pid: str = Field("self", pattern=r"^(self|[1-9]\d*)$")

    _regex = field_validator("device_exclude")(check_regex)
