"""The kernel log's records and the driver's Xid lines: the parsers on this machine's real /dev/kmsg
and on the forms the driver has written, the reader's history and its place across a reload, and one
event per Xid whichever source saw it."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kmsg_support import KMSG, need_kmsg_writer, own_domain, write_xid

from agent.faults.xids import XidSource, XidTally
from agent.sources.gpu.kmsg import MalformedRecord, bus_key, parse_record, parse_xid
from agent.sources.gpu.kmsg_reader import KernelLog, LogPosition

# the forms of the driver's Xid lines over the years (NVIDIA's Xid catalog, and logs users posted)
XID_LINES = [
    ("NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.", (0, 0x18, 0), 79),
    (
        "NVRM: Xid (PCI:0000:b9:00): 74, pid=<unknown>, name=<unknown>, NVLink: fatal error on link 6",
        (0, 0xB9, 0),
        74,
    ),
    ("NVRM: Xid (PCI:0000:01:00): 31, Ch 00000009, engmask 00000101, intr 10000000", (0, 1, 0), 31),
    ("NVRM: Xid (0000:01:00): 13, 0005 00000000 0000502d 00000104 00000000 00000100", (0, 1, 0), 13),
    ("NVRM: Xid (PCI:0000:03:00): 31, pid='1234', name='python3', 'Illegal memory access'", (0, 3, 0), 31),
    ("NVRM: Xid (PCI:0001:3d:00.0): 48, An uncorrectable double bit error", (1, 0x3D, 0), 48),
]
NOT_XID = [
    "NVRM: GPU at PCI:0000:18:00: GPU-8ba16ede-b303-d769-7297-d266d9383b89",
    "NVRM: GPU 0000:18:00.0: RmInitAdapter failed! (0x24:0x65:1457)",
    "NVRM: Xid (PCI:0000:18:00): seventy-nine",
    "NVRM: Xid (0009:00): 53, CMDre 00000000",  # a very old form without the bus's device: unknowable
    "pcieport 0000:17:01.0: AER: Corrected error message received from 0000:3d:00.0",
    "",
]


@pytest.mark.parametrize(("line", "bus", "xid"), XID_LINES)
def test_xid_lines_in_the_drivers_forms(line: str, bus: tuple[int, int, int], xid: int) -> None:
    found = parse_xid(line)
    assert found is not None and (found.bus, found.xid, found.text) == (bus, xid, line)


@pytest.mark.parametrize("line", NOT_XID)
def test_other_driver_lines_are_not_xids(line: str) -> None:
    assert parse_xid(line) is None


def test_nvml_and_the_driver_name_one_gpu_alike() -> None:
    assert bus_key("00000000:18:00.0") == bus_key("0000:18:00") == bus_key("18:00") == (0, 0x18, 0)
    assert bus_key("00000001:B9:00.0") == bus_key("0001:b9:00") == (1, 0xB9, 0)
    assert bus_key("0000:18:01") != bus_key("0000:18:00")
    for bad in ("", "18", "zz:00", "0:1:2:3", "0000:18:00:00"):
        assert bus_key(bad) is None


def test_a_record_with_its_continuation_and_escapes() -> None:
    rec = parse_record(b"4,1234,5678901,-;NVRM: a\\x09tab\n SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0\n")
    assert (rec.facility, rec.level, rec.seq, rec.usec, rec.message) == (0, 4, 1234, 5678901, "NVRM: a\ttab")
    user = parse_record(b"11,7,8,c,more;from user space\n")  # 11 = facility 1 (user), level 3
    assert (user.facility, user.level, user.message) == (1, 3, "from user space")


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"no prefix at all\n", "no ';'"),
        (b"4,12;short\n", "not 4 or more"),
        (b"x,1,2,-;text\n", "not numbers"),
        (b"4,-1,2,-;text\n", "negative"),
    ],
)
def test_a_malformed_record_says_what_is_wrong(raw: bytes, says: str) -> None:
    with pytest.raises(MalformedRecord, match=says):
        parse_record(raw)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_no_bytes_break_the_parsers(raw: bytes) -> None:
    try:
        rec = parse_record(raw)
    except MalformedRecord:
        return
    parse_xid(rec.message)  # never raises


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.integers(0, 99999))
def test_an_xid_line_inside_any_text(noise: str, xid: int) -> None:
    line = f"NVRM: Xid (PCI:0000:18:00): {xid}, {noise}"
    found = parse_xid(line)
    assert found is not None and found.xid == xid and found.bus == (0, 0x18, 0)


def _need_kmsg_reader() -> None:
    if not os.access(KMSG, os.R_OK):
        pytest.skip(f"{KMSG} is not readable here")
    try:
        os.close(os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK))
    except PermissionError:
        pytest.skip(f"{KMSG}: reading needs CAP_SYSLOG where kernel.dmesg_restrict=1")


def test_this_machines_kernel_log_parses_whole() -> None:
    """Every record the real ring buffer holds now: none malformed, sequence numbers rising."""
    _need_kmsg_reader()
    log = KernelLog(KMSG, LogPosition())
    log.open()
    try:
        d = log.drain()
    finally:
        log.close()
    assert d.history and not d.new and not d.malformed, d.malformed[:3]
    seqs = [r.seq for r in d.history]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert all(r.facility >= 0 and 0 <= r.level <= 7 for r in d.history)


def test_history_new_lines_and_a_reload() -> None:
    need_kmsg_writer()
    _need_kmsg_reader()
    domain = own_domain()

    def ours(records) -> list[int]:
        return [x.xid for r in records if (x := parse_xid(r.message)) and x.bus[0] == domain]

    write_xid(domain, 0x18, 13)  # there before the process first looks: history
    position = LogPosition()
    first = KernelLog(KMSG, position)
    first.open()
    d = first.drain()
    assert ours(d.history) == [13] and ours(d.new) == []
    write_xid(domain, 0x18, 79)
    d = first.drain()
    assert ours(d.history) == [] and ours(d.new) == [79]
    first.close()
    write_xid(domain, 0x2A, 48)  # while a reload has the log closed
    again = KernelLog(KMSG, position)  # the reload's reader, at the process's place
    again.open()
    d = again.drain()
    assert ours(d.history) == [] and ours(d.new) == [48]  # 13 and 79 not again, 48 not missed
    again.close()
    fresh = KernelLog(KMSG, LogPosition())  # a restarted process: all of it is history
    fresh.open()
    d = fresh.drain()
    fresh.close()
    assert ours(d.history) == [13, 79, 48] and ours(d.new) == []


def test_one_event_per_xid_whichever_source_saw_it() -> None:
    tally = XidTally()
    assert tally.seen(2, 79, XidSource.KERNEL_LOG) == 1
    assert tally.seen(2, 79, XidSource.NVML) == 0  # the same error, from NVML's event set
    assert tally.seen(2, 79, XidSource.NVML) == 1  # a second one: NVML saw it first
    assert tally.seen(2, 79, XidSource.KERNEL_LOG) == 0
    assert tally.seen(3, 79, XidSource.NVML) == 1  # another GPU
    assert tally.seen(2, 48, XidSource.KERNEL_LOG, 3) == 3
    assert tally.by_source() == {"nvml": 3, "kernel-log": 5}
