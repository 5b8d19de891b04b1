"""training_node_network_* (NICs) and training_node_rdma_* (InfiniBand/RoCE/eRDMA ports) families."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.snapshot import NodeSnapshot
from agent.sources.network.part import NetworkPart

_NIC_COUNTERS = (
    ("receive_bytes", "rx_bytes", "Bytes received by the interface."),
    ("transmit_bytes", "tx_bytes", "Bytes sent by the interface."),
    ("receive_packets", "rx_packets", "Packets received by the interface."),
    ("transmit_packets", "tx_packets", "Packets sent by the interface."),
    ("receive_drop", "rx_drops", "Received packets dropped (no buffer, filtered)."),
    ("transmit_drop", "tx_drops", "Packets dropped on transmit."),
    ("receive_errors", "rx_errors", "Receive errors (CRC, frame, overrun)."),
    ("transmit_errors", "tx_errors", "Transmit errors."),
)
_RDMA_COUNTERS = (
    ("receive_bytes", "rx_bytes", "Bytes received by the RDMA port (port_rcv_data × 4, or eRDMA bytes)."),
    ("transmit_bytes", "tx_bytes", "Bytes sent by the RDMA port (port_xmit_data × 4, or eRDMA bytes)."),
    (
        "transmit_wait_ticks",
        "xmit_wait",
        "Ticks the port had data to send but could not (port_xmit_wait): credit starvation, congestion.",
    ),
    (
        "cnp_sent",
        "cnp_sent",
        "RoCE congestion notification packets sent as notification point (np_cnp_sent).",
    ),
    (
        "cnp_handled",
        "cnp_handled",
        "RoCE congestion notification packets handled as reaction point (rp_cnp_handled).",
    ),
    ("out_of_buffer", "out_of_buffer", "Packets dropped for lack of receive WQEs (out_of_buffer)."),
)


_NIC_GAUGES = (
    (
        "speed_bytes",
        "speed_bytes",
        "Link capacity in bytes/s: /sys/class/net/<if>/speed, or [network] capacity where that is unknown.",
    ),
    (
        "shaper_rate_bytes",
        "shaped_bytes",
        "Rate of a traffic shaper on the NIC on this node (a root tc tbf), bytes/s: the link's ceiling here.",
    ),
)


def render(snap: NodeSnapshot) -> Iterable[Metric]:
    part = snap.part(NetworkPart)
    if part is None:
        return
    for suffix, attr, doc in _NIC_COUNTERS:
        fam = CounterMetricFamily(f"training_node_network_{suffix}", doc, labels=["device"])
        for n in part.nics:
            v = getattr(n, attr)
            if v is not None:
                fam.add_metric([n.device], v)
        yield fam
    for suffix, attr, doc in _NIC_GAUGES:
        gauge = GaugeMetricFamily(f"training_node_network_{suffix}", doc, labels=["device"])
        for n in part.nics:
            v = getattr(n, attr)
            if v is not None:
                gauge.add_metric([n.device], v)
        yield gauge
    labels = ["device", "port"]
    for suffix, attr, doc in _RDMA_COUNTERS:
        fam = CounterMetricFamily(f"training_node_rdma_{suffix}", doc, labels=labels)
        for p in part.rdma:
            v = getattr(p, attr)
            if v is not None:
                fam.add_metric([p.device, str(p.port)], v)
        yield fam
    rate = GaugeMetricFamily(
        "training_node_rdma_rate_bytes",
        "Link rate of the RDMA port in bytes/s (ports/N/rate).",
        labels=labels,
    )
    for p in part.rdma:
        if p.rate_bytes is not None:
            rate.add_metric([p.device, str(p.port)], p.rate_bytes)
    yield rate
