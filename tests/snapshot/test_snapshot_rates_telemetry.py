"""Rates from consecutive storage/network parts: a counter that goes backwards (reset, wrap,
interface re-created) or is missing gives no rate for that interval, never a negative one."""

from __future__ import annotations

from dataclasses import astuple
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from agent.snapshot.rates import counter_rate
from agent.sources.network.part import NetworkPart, NicStat, RdmaPort
from agent.sources.network.rates import network_rates
from agent.sources.storage.part import DiskStat, NfsMount, StoragePart
from agent.sources.storage.rates import storage_rates


def disk(name: str, sectors: int, io_ms: int) -> DiskStat:
    return DiskStat(name, 1, 0, sectors, 0.0, 0, 0, 0.0, 0, io_ms / 1000)


def nfs(mp: str, server_read: int, ops: int, rtt: float) -> NfsMount:
    return NfsMount(mp, "s:/e", "tcp", "nfs4", 0, server_read, ops, rtt, rtt)


def nic(name: str, rx: int | None, tx: int | None) -> NicStat:
    return NicStat(name, rx, tx, 0, 0, 0, 0, 0, 0, None)


def port(dev: str, rx: int | None, wait: int | None = 0, cnp: int | None = None) -> RdmaPort:
    return RdmaPort(dev, 1, rx, rx, None, xmit_wait=wait, cnp_sent=cnp, cnp_handled=cnp)


def test_storage_rates_and_resets():
    a = StoragePart(
        (disk("sda", 1000, 0), disk("sdb", 5000, 100)), (nfs("/a", 100, 10, 1.0), nfs("/b", 9, 9, 9))
    )
    b = StoragePart(
        (disk("sda", 3000, 500), disk("sdb", 10, 50)), (nfs("/a", 300, 30, 3.0), nfs("/b", 1, 1, 1))
    )
    r = storage_rates(a, b, 2.0)
    assert r.disk_read == {"sda": 2000 * 512 / 2}
    assert r.disk_busy_ratio == {"sda": 0.25}
    assert r.nfs_read == {"/a": 100.0}
    assert r.nfs_read_ops == {"/a": 10.0}
    assert r.nfs_read_rtt_seconds == {"/a": 0.1}  # 2 s of RTT over 20 READs


def test_network_rates_resets_and_missing_counters():
    a = NetworkPart(
        (nic("eth0", 100, 100), nic("eth1", 10**12, 5), nic("ib", None, None)), (port("mlx5_0", 50),)
    )
    b = NetworkPart((nic("eth0", 300, 50), nic("eth1", 10, 7), nic("ib", None, None)), (port("mlx5_0", 20),))
    r = network_rates(a, b, 1.0)
    assert r.nic_rx == {"eth0": 200.0}
    assert r.nic_tx == {"eth1": 2.0}
    assert r.rdma_rx == {} and r.rdma_tx == {}
    assert r.rdma_xmit_wait == {("mlx5_0", 1): 0.0}
    assert r.rdma_cnp == {}  # no congestion counters on this port


@given(
    st.lists(st.integers(0, 2**64), min_size=2, max_size=8),
    st.floats(min_value=0.001, max_value=60),
)
def test_rates_are_never_negative(values, dt):
    parts = [NetworkPart((nic("eth0", v, v),), (port("p", v, v, v),)) for v in values]
    for a, b in pairwise(parts):
        for series in astuple(network_rates(a, b, dt)):
            assert all(v >= 0 for v in series.values())
    assert counter_rate(5, 4, 1.0) is None and counter_rate(None, 4, 1.0) is None
