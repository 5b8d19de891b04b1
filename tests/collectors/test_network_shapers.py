"""Traffic shapers on the node's own NICs (``agent/sources/network/qdisc.py``): the rtnetlink parser on
the kernel's own bytes and on damaged ones, and the collector against a real veth with a real tbf."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

from conftest import need_binary, need_root

from agent.sources.network.collector import NetworkCollector
from agent.sources.network.qdisc import dump_qdiscs, parse_qdiscs

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "rtnetlink" / "qdisc-dump-tbf.bin"
# captured with `python -c "from agent.sources.network.qdisc import dump_qdiscs; ..."` after
#   tc qdisc add dev lo root tbf rate 40gbit burst 1mb latency 10ms        (ifindex 1: rate64)
#   tc qdisc add dev classifier653h root tbf rate 50mbit burst 32kbit ...  (ifindex 29)
#   tc qdisc add dev tnqa root tbf rate 20mbit burst 32kbit latency 400ms  (ifindex 31)
# beside eth0's pfifo_fast and the noqueue of the other interfaces (not shapers)


def test_the_kernels_dump_gives_each_root_tbf_rate_by_ifindex() -> None:
    parsed = parse_qdiscs(FIXTURE.read_bytes())
    assert parsed.malformed == 0
    assert parsed.value == {1: 5_000_000_000, 29: 6_250_000, 31: 2_500_000}


def test_damaged_dumps_are_counted_never_raised() -> None:
    data = FIXTURE.read_bytes()
    rnd = random.Random(23)
    for _ in range(400):
        cut = data[: rnd.randrange(len(data))]
        flipped = bytearray(data)
        for _ in range(rnd.randint(1, 8)):
            flipped[rnd.randrange(len(flipped))] = rnd.randrange(256)
        for sample in (cut, bytes(flipped), os.urandom(rnd.randrange(64))):
            parsed = parse_qdiscs(sample)
            assert all(isinstance(k, int) and v > 0 for k, v in parsed.value.items())
    # a truncated header is one malformed message, not an exception
    assert parse_qdiscs(data[:10]).value == {}
    assert parse_qdiscs(data[: len(data) // 2]).malformed >= 0


def _veth(a: str, b: str, rate: str) -> int:
    """A veth pair, ``a`` up under a root tbf at ``rate``: ``a``'s ifindex."""
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    subprocess.run(["ip", "link", "set", a, "up"], check=True)
    tbf = ["tc", "qdisc", "add", "dev", a, "root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"]
    subprocess.run(tbf, check=True)
    return int(Path(f"/sys/class/net/{a}/ifindex").read_text())


def test_the_collector_names_the_shaped_nic_and_its_rate() -> None:
    need_root("a veth and a tc qdisc")
    need_binary("tc", "iproute2")
    a, b = f"tnsh{os.getpid() % 10000}a", f"tnsh{os.getpid() % 10000}b"
    try:
        index = _veth(a, b, "20mbit")
        assert parse_qdiscs(dump_qdiscs()).value.get(index) == 2_500_000
        col = NetworkCollector("/proc", "/sys", device_exclude="^$")
        nics = {n.device: n for n in col.collect().nics}
        assert nics[a].shaped_bytes == 2_500_000
        assert nics[b].shaped_bytes is None  # a veth's default qdisc is no shaper
        # taken off: seen at the next refresh
        subprocess.run(["tc", "qdisc", "del", "dev", a, "root"], check=True)
        col._shapers_at = float("-inf")
        assert {n.device: n for n in col.collect().nics}[a].shaped_bytes is None
        # the same name back as another interface: known by its new ifindex at the next refresh
        subprocess.run(["ip", "link", "del", a], check=True)
        assert _veth(a, b, "40mbit") != index
        col._shapers_at = float("-inf")
        assert {n.device: n for n in col.collect().nics}[a].shaped_bytes == 5_000_000
        col.close()
    finally:
        subprocess.run(["ip", "link", "del", a], check=False)
