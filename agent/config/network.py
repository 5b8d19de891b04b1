"""[network]: NICs and RDMA ports."""

from __future__ import annotations

from pydantic import Field, field_validator

from agent.config.storage import check_regex
from agent.config.types import ByteRate, StrictModel


class NetworkSection(StrictModel):
    enabled: bool = True
    device_exclude: str = Field(
        # loopback and the virtual interfaces of containers, bridges, overlays and tc (ifb)
        r"^(lo|veth.*|docker.*|br-.*|virbr.*|cni.*|flannel.*|cali.*|tunl.*|vxlan.*|kube-ipvs.*|kube-bridge"
        r"|nodelocaldns|cilium_.*|lxc.*|ifb.*|dummy.*)$",
        description="regex over interface names that are skipped",
    )
    # bytes/s per interface where /sys/class/net/<if>/speed is unknown (-1 on virtio/eRDMA NICs)
    capacity: dict[str, ByteRate] = Field(default_factory=dict)
    # read /sys/class/infiniband (InfiniBand, RoCE, eRDMA ports)
    rdma: bool = True

    _regex = field_validator("device_exclude")(check_regex)
