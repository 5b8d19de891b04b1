"""NetworkCollector: NICs and RDMA ports on fixture trees, on trees the test writes, and on this
machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.config import parse_config
from agent.sources import SourceAbsent
from agent.sources.network.collector import NetworkCollector

EXCLUDE = parse_config({}).network.device_exclude
NETDEV = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop\n"
    "    lo: 9 9 0 0 0 0 0 0 9 9 0 0 0 0 0 0\n"
    "  eth0: 1000 10 1 2 0 0 0 0 2000 20 3 4 0 0 0 0\n"
    "  eth1: 5 1 0 0 0 0 0 0 6 1 0 0 0 0 0 0\n"
    "vethab: 5 1 0 0 0 0 0 0 6 1 0 0 0 0 0 0\n"
    "  bond0: 5 1 0 0 0 0 0 0 6 1 0 0 0 0 0 0\n"
)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    ib = "class/infiniband"
    _write(proc, {"net/dev": NETDEV})
    _write(
        sys,
        {
            "class/net/eth0/speed": "25000\n",
            "class/net/eth1/speed": "-1\n",  # virtio: unknown, capacity from config
            "class/net/bond0/speed": "-1\n",  # unknown and not configured
            "class/net/lo/speed": "garbage\n",  # excluded: not even read
            # mlx5 RoCE port with congestion counters
            f"{ib}/mlx5_0/ports/1/rate": "200 Gb/sec (4X HDR)\n",
            f"{ib}/mlx5_0/ports/1/counters/port_rcv_data": "1000\n",
            f"{ib}/mlx5_0/ports/1/counters/port_xmit_data": "2000\n",
            f"{ib}/mlx5_0/ports/1/counters/port_xmit_wait": "77\n",
            f"{ib}/mlx5_0/ports/1/counters/symbol_error": "0\n",
            f"{ib}/mlx5_0/ports/1/hw_counters/np_cnp_sent": "5\n",
            f"{ib}/mlx5_0/ports/1/hw_counters/rp_cnp_handled": "6\n",
            f"{ib}/mlx5_0/ports/1/hw_counters/out_of_buffer": "7\n",
            # eRDMA: no ports/1/counters folder; byte counters with the hw_ prefix
            f"{ib}/erdma_0/ports/1/rate": "100 Gb/sec (4X EDR)\n",
            f"{ib}/erdma_0/ports/1/hw_counters/hw_rx_bytes_cnt": "123\n",
            f"{ib}/erdma_0/ports/1/hw_counters/hw_tx_bytes_cnt": "456\n",
            # newer eRDMA driver: device-level hw_counters without the prefix, and no rate file
            f"{ib}/erdma_1/hw_counters/rx_bytes_cnt": "11\n",
            f"{ib}/erdma_1/hw_counters/tx_bytes_cnt": "22\n",
            f"{ib}/erdma_1/ports/1/state": "4: ACTIVE\n",
            # a device with no ports folder at all
            f"{ib}/broken_0/node_guid": "x\n",
        },
    )
    return proc, sys


def test_nics_speed_capacity_and_exclude(tree):
    proc, sys = tree
    part = NetworkCollector(str(proc), str(sys), EXCLUDE, capacity={"eth1": 3.125e9}).collect()
    by = {n.device: n for n in part.nics}
    assert sorted(by) == ["bond0", "eth0", "eth1"]
    eth0 = by["eth0"]
    assert (eth0.rx_bytes, eth0.tx_bytes, eth0.rx_packets, eth0.tx_packets) == (1000, 2000, 10, 20)
    assert (eth0.rx_errors, eth0.rx_drops, eth0.tx_errors, eth0.tx_drops) == (1, 2, 3, 4)
    assert eth0.speed_bytes == 25000 * 125000
    assert by["eth1"].speed_bytes == 3_125_000_000
    assert by["bond0"].speed_bytes is None
    assert part.malformed_lines == 0


def test_rdma_ports_mlx5_and_erdma_without_counters_folder(tree):
    proc, sys = tree
    part = NetworkCollector(str(proc), str(sys), EXCLUDE).collect()
    by = {(p.device, p.port): p for p in part.rdma}
    assert sorted(by) == [("erdma_0", 1), ("erdma_1", 1), ("mlx5_0", 1)]
    mlx5 = by[("mlx5_0", 1)]
    assert (mlx5.rx_bytes, mlx5.tx_bytes, mlx5.rate_bytes) == (4000, 8000, 25_000_000_000)
    assert (mlx5.xmit_wait, mlx5.cnp_sent, mlx5.cnp_handled, mlx5.out_of_buffer) == (77, 5, 6, 7)
    e0 = by[("erdma_0", 1)]
    assert (e0.rx_bytes, e0.tx_bytes, e0.rate_bytes, e0.xmit_wait) == (123, 456, 12_500_000_000, None)
    e1 = by[("erdma_1", 1)]
    assert (e1.rx_bytes, e1.tx_bytes, e1.rate_bytes) == (11, 22, None)


def test_rdma_disabled_and_new_device_picked_up(tree):
    proc, sys = tree
    assert NetworkCollector(str(proc), str(sys), EXCLUDE, rdma=False).collect().rdma == ()
    c = NetworkCollector(str(proc), str(sys), EXCLUDE)
    assert len(c.collect().rdma) == 3
    _write(sys / "class/infiniband/mlx5_1/ports/1", {"counters/port_rcv_data": "1", "rate": "400 Gb/sec"})
    ports = c.collect().rdma
    assert [(p.device, p.rx_bytes) for p in ports if p.device == "mlx5_1"] == [("mlx5_1", 4)]


def test_counter_files_vanishing_and_garbled(tree):
    proc, sys = tree
    c = NetworkCollector(str(proc), str(sys), EXCLUDE)
    c.collect()
    (sys / "class/infiniband/mlx5_0/ports/1/counters/port_rcv_data").unlink()  # driver reload
    (sys / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data").write_text("\x00\x01garbage")
    (sys / "class/net/eth0/speed").write_text("")
    (proc / "net/dev").write_text(NETDEV + "  eth9: 1 2 3\n")
    part = c.collect()
    mlx5 = next(p for p in part.rdma if p.device == "mlx5_0")
    assert mlx5.rx_bytes is None and mlx5.tx_bytes is None and mlx5.xmit_wait == 77
    assert next(n for n in part.nics if n.device == "eth0").speed_bytes is None
    assert part.malformed_lines == 3  # the xmit counter, the speed file, the eth9 line
    assert part.malformed_lines_total == 3


def test_nothing_to_read(tmp_path):
    with pytest.raises(SourceAbsent):
        NetworkCollector(str(tmp_path / "proc"), str(tmp_path / "sys"), EXCLUDE).collect()


def test_fixture_trees(kernel_fixtures):
    ne = kernel_fixtures / "node_exporter"
    part = NetworkCollector(str(ne / "proc"), str(ne / "sys"), EXCLUDE).collect()
    assert part.malformed_lines == 0
    # no proc/net/dev in this tree: the interfaces sysfs shows, with speeds and no counters
    assert {n.device: n.speed_bytes for n in part.nics} == {"bond0": None, "dmz": 125e6, "int": 125e6}
    assert all(n.rx_bytes is None for n in part.nics)
    by = {(p.device, p.port): p for p in part.rdma}
    assert by[("i40iw0", 1)].rx_bytes is None  # "N/A (no PMA)"
    assert by[("mlx4_0", 1)].rx_bytes == 4631917 * 4
    pf = kernel_fixtures / "procfs"
    part = NetworkCollector(str(pf / "proc"), str(pf / "sys"), EXCLUDE).collect()
    assert part.malformed_lines == 0
    assert [(n.device, n.rx_bytes, n.speed_bytes) for n in part.nics] == [("eth0", 874354587, 125e6)]
    assert sorted(p.device for p in part.rdma) == ["hfi1_0", "mlx4_0", "mlx4_0", "mlx5_0"]


def test_this_machine():
    part = NetworkCollector("/proc", "/sys", EXCLUDE).collect()
    assert part.malformed_lines == 0
    with open("/proc/net/dev") as f:
        names = {ln.split(":")[0].strip() for ln in f if ":" in ln}
    assert {n.device for n in part.nics if n.rx_bytes is not None} == {
        n for n in names if not re.search(EXCLUDE, n)
    }
