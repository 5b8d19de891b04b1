"""Every telemetry parser on truncated, garbled, empty and huge input: it never raises, it returns
its declared types, and a broken line costs exactly that line, counted."""

from __future__ import annotations

import pytest
from conftest import KERNEL_FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.sources.network.infiniband import build_port, parse_counter, parse_rate
from agent.sources.network.netclass import parse_speed
from agent.sources.network.netdev import parse_net_dev
from agent.sources.processes.cgroup import (
    parse_blkio_bytes,
    parse_cfs_quota,
    parse_cpu_max,
    parse_io_stat,
    parse_proc_cgroup,
)
from agent.sources.processes.procpid import parse_cpus_allowed, parse_pid_io, parse_pid_stat, parse_schedstat
from agent.sources.storage.diskstats import parse_diskstats
from agent.sources.storage.mountstats import parse_mountstats

DISKSTATS = "\n".join(
    [
        "   8       0 sda 25354637 34367663 1003346126 18492372 28444756 11134226 505697032 63877960 0 "
        "9653880 82621804",
        "   8      16 sdb 326552 841 9657779 84 41822 2895 1972905 5007 0 60730 67070 68851 0 1925173784 "
        "11130",
        " 259       0 nvme0n1 47114 4 4643973 21650 1078320 43950 39451633 1011053 0 222766 1032546 1 2 3 4 "
        "1555 1944",
    ]
)
NETDEV = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop\n"
    "  eth0: 874354587 1036395 0 0 0 0 0 0 563352563  732147 0 0 0 0 0 0\n"
    "  eth1: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"
    "    lo: 1664039048 1566805 0 0 0 0 0 0 1664039048 1566805 0 0 0 0 0 0\n"
)
MOUNTSTATS = (
    "device /dev/sda1 mounted on / with fstype ext4\n"
    "device 192.168.1.1:/srv/test mounted on /mnt/nfs/test with fstype nfs4 statvers=1.1\n"
    "\topts:\trw,vers=4.0,proto=tcp\n"
    "\tage:\t13968\n"
    "\tbytes:\t1207640230 0 0 0 1210214218 0 295483 0\n"
    "\tRPC iostats version: 1.0  p/v: 100003/4 (nfs)\n"
    "\txprt:\ttcp 832 0 1 0 11 6428 6428 0 12154 0 24 26 5726\n"
    "\tper-op statistics\n"
    "\t        NULL: 0 0 0 0 0 0 0 0\n"
    "\t        READ: 1298 1298 0 207680 1210292152 6 79386 79407\n"
    "\t       WRITE: 0 0 0 0 0 0 0 0\n"
    "\n"
    "device 10.0.0.2:/cpfs mounted on /mnt/cpfs with fstype nfs statvers=1.0\n"
    "\tbytes:\t1 2 3 4 5 6 7 8\n"
    "\txprt:\tudp 832 0 6428 6428 0 12154 0\n"
    "\tper-op statistics\n"
    "\t        READ: 1 1 0 2 3 4 5 6\n"
)
STAT = (
    "4242 (pt worker (1)) S 5392 7446 5392 34835 7446 4218880 32533 309516 26 82 1677 44 158 99 20 0 12 0 "
    "82375 5"
)

# kernel-ish tokens, so garbled input often looks almost right
TOKENS = st.sampled_from(
    ["device", "mounted", "on", "with", "fstype", "nfs", "nfs4", "statvers=1.1", "bytes:", "READ:", "xprt:",
     "tcp", "eth0:", "|", "(", ")", ":", "-", "-1", "0", "1", "18446744073709551615", "9" * 5000, "N/A",
     "Gb/sec", "\t", "\n", " ", "\x00", "é", "sda"]
)  # fmt: skip
GARBAGE = st.one_of(
    st.text(max_size=2000),
    st.lists(TOKENS, max_size=300).map(" ".join),
    st.lists(TOKENS, max_size=300).map("".join),
    st.binary(max_size=2000).map(lambda b: b.decode("utf-8", "replace")),
)

TEXT_PARSERS = [
    parse_diskstats,
    parse_mountstats,
    parse_net_dev,
    parse_speed,
    parse_counter,
    parse_rate,
    parse_pid_stat,
    parse_pid_io,
    parse_schedstat,
    parse_cpus_allowed,
    parse_proc_cgroup,
    parse_cpu_max,
    parse_io_stat,
    parse_blkio_bytes,
]


def _check(parsed) -> None:
    assert isinstance(parsed.malformed, int) and parsed.malformed >= 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=GARBAGE)
def test_garbage_never_raises(text):
    for parse in TEXT_PARSERS:
        _check(parse(text))
    _check(parse_cfs_quota(text, text))
    _check(build_port("d", 1, {"counters/port_rcv_data": text, "hw_counters/tx_bytes_cnt": text}, text))


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_truncated_and_spliced_real_text_never_raises(data):
    for parse, text in (
        (parse_diskstats, DISKSTATS),
        (parse_net_dev, NETDEV),
        (parse_mountstats, MOUNTSTATS),
        (parse_pid_stat, STAT),
    ):
        cut = data.draw(st.integers(0, len(text)))
        junk = data.draw(GARBAGE)
        at = data.draw(st.integers(0, len(text)))
        for variant in (text[:cut], text[cut:], text[:at] + junk + text[at:], text * 3):
            _check(parse(variant))


@settings(max_examples=100, deadline=None)
@given(line=st.integers(0, 2), keep=st.integers(0, 13), junk=st.sampled_from(["x", "-5", "1.5", "0x10"]))
def test_one_broken_disk_line_costs_one_line(line, keep, junk):
    good = parse_diskstats(DISKSTATS)
    lines = DISKSTATS.splitlines()
    fields = lines[line].split()
    if keep < 3:  # corrupt a number instead of cutting
        fields[3 + keep] = junk
        lines[line] = " ".join(fields)
    else:
        lines[line] = " ".join(fields[:keep])
    parsed = parse_diskstats("\n".join(lines))
    assert parsed.malformed == 1
    assert len(parsed.value) == len(good.value) - 1
    assert [d for d in good.value if d.device != fields[2]] == parsed.value


@settings(max_examples=100, deadline=None)
@given(line=st.integers(2, 4), keep=st.integers(0, 15))
def test_one_broken_netdev_line_costs_one_line(line, keep):
    lines = NETDEV.splitlines()
    name, _, rest = lines[line].partition(":")
    lines[line] = name + ":" + " ".join(rest.split()[:keep])
    parsed = parse_net_dev("\n".join(lines))
    assert parsed.malformed == 1
    assert name.strip() not in {n.device for n in parsed.value}
    assert len(parsed.value) == 2


@settings(max_examples=60, deadline=None)
@given(which=st.sampled_from(["bytes:", "READ:"]), mount=st.integers(0, 1), keep=st.integers(0, 4))
def test_one_broken_nfs_line_costs_that_mount(which, mount, keep):
    lines = MOUNTSTATS.splitlines()
    idx = [i for i, ln in enumerate(lines) if ln.split()[:1] == [which]][mount]
    lines[idx] = " ".join(lines[idx].split()[: keep + 1])
    parsed = parse_mountstats("\n".join(lines))
    assert parsed.malformed == 1
    assert [m.mountpoint for m in parsed.value] == [["/mnt/nfs/test", "/mnt/cpfs"][1 - mount]]


def test_huge_input_is_parsed_not_raised():
    big = (DISKSTATS + "\n") * 20000 + "garbage\n" * 1000  # ~4 MB
    parsed = parse_diskstats(big)
    assert len(parsed.value) == 60000 and parsed.malformed == 1000
    nfs = parse_mountstats(MOUNTSTATS * 2000)
    assert len(nfs.value) == 4000 and nfs.malformed == 0
    assert parse_pid_stat("1 (" + "x" * 1_000_000 + ") " + STAT.split(") ", 1)[1]).value is not None


@pytest.mark.parametrize(
    "rel,parse",
    [
        ("node_exporter/proc/diskstats", parse_diskstats),
        ("procfs/proc/diskstats", parse_diskstats),
        ("node_exporter/proc/10/mountstats", parse_mountstats),
        ("procfs/proc/26231/mountstats", parse_mountstats),
        ("procfs/proc/net/dev", parse_net_dev),
    ],
)
def test_every_truncation_of_real_files(rel, parse):
    path = KERNEL_FIXTURES / rel
    text = path.read_text()
    full = parse(text)
    assert full.malformed == 0
    step = max(1, len(text) // 400)
    for cut in range(0, len(text), step):
        part = parse(text[:cut])
        _check(part)
        # a cut loses at most the record it falls in; everything before it is kept as it was
        assert len(part.value) <= len(full.value)
        assert part.value[:-1] == full.value[: max(0, len(part.value) - 1)]
        if parse is not parse_mountstats:
            # (a cut inside the last number of a READ: line leaves a shorter number that still parses)
            assert part.value == full.value[: len(part.value)]
