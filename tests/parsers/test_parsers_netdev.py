"""/proc/net/dev and /sys/class/net/<if>/speed."""

from __future__ import annotations

from agent.sources.network.netclass import parse_speed
from agent.sources.network.netdev import parse_net_dev

HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|"
    "bytes    packets errs drop fifo colls carrier compressed\n"
)


def test_procfs_fixture(kernel_fixtures):
    text = (kernel_fixtures / "procfs" / "proc" / "net" / "dev").read_text()
    parsed = parse_net_dev(text)
    assert parsed.malformed == 0
    by = {n.device: n for n in parsed.value}
    assert sorted(by) == ["docker0", "eth0", "lo", "vethf345468"]
    eth0 = by["eth0"]
    assert (eth0.rx_bytes, eth0.rx_packets, eth0.tx_bytes, eth0.tx_packets) == (
        874354587,
        1036395,
        563352563,
        732147,
    )
    assert eth0.speed_bytes is None


def test_columns_and_old_kernel_format():
    text = HEADER + (
        "  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"
        "eth1:100 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"  # 2.x kernels glued name and number
        "  bad0: 1 2 3\n"
        "  bad1: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 x\n"
        "no colon here 1 2 3\n"
        "\n"
    )
    parsed = parse_net_dev(text)
    assert [n.device for n in parsed.value] == ["eth0", "eth1"]
    assert parsed.malformed == 3
    n = parsed.value[0]
    assert (n.rx_bytes, n.rx_packets, n.rx_errors, n.rx_drops) == (1, 2, 3, 4)
    assert (n.tx_bytes, n.tx_packets, n.tx_errors, n.tx_drops) == (9, 10, 11, 12)
    assert parsed.value[1].rx_bytes == 100


def test_speed(kernel_fixtures):
    assert parse_speed("1000\n").value == 125_000_000
    assert parse_speed("100000").value == 12_500_000_000
    for unknown in ("-1\n", "0"):
        p = parse_speed(unknown)
        assert p.value is None and p.malformed == 0
    for garbage in ("", "fast", "10G"):
        p = parse_speed(garbage)
        assert p.value is None and p.malformed == 1
    net = kernel_fixtures / "node_exporter" / "sys" / "class" / "net"
    assert parse_speed((net / "dmz" / "speed").read_text()).value == 125_000_000
    assert parse_speed((net / "bond0" / "speed").read_text()).value is None
