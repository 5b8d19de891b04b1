"""/proc/<pid>/mountstats: NFS mounts on real kernel text and on synthetic variants."""

from __future__ import annotations

from agent.sources.storage.mountstats import parse_mountstats, unescape


def _block(
    device="srv:/data",
    mountpoint="/mnt/data",
    fstype="nfs4",
    statvers="1.1",
    xprt="tcp 832 0 1 0 11 6428 6428 0 12154 0 24 26 5726",
    bytes_="100 0 0 0 4000 0 10 0",
    read="7 7 0 800 4100 3 250 260",
) -> str:
    head = f"device {device} mounted on {mountpoint} with fstype {fstype}"
    if statvers:
        head += f" statvers={statvers}"
    lines = [head, "\topts:\trw,vers=4.1", "\tage:\t10"]
    if bytes_ is not None:
        lines.append(f"\tbytes:\t{bytes_}")
    lines += ["\tRPC iostats version: 1.0  p/v: 100003/4 (nfs)"]
    if xprt is not None:
        lines.append(f"\txprt:\t{xprt}")
    lines += ["\tper-op statistics", "\t        NULL: 0 0 0 0 0 0 0 0"]
    lines.append("\t     READDIR: 99 99 0 1 1 1 999 999")  # must not be taken for READ
    if read is not None:
        lines.append(f"\t        READ: {read}")
    lines.append("\t       WRITE: 0 0 0 0 0 0 0 0")
    return "\n".join(lines) + "\n"


def test_node_exporter_fixture(kernel_fixtures):
    text = (kernel_fixtures / "node_exporter" / "proc" / "10" / "mountstats").read_text()
    parsed = parse_mountstats(text)
    assert parsed.malformed == 0
    mounts = parsed.value
    # rootfs, sysfs, proc and ext4 are skipped; the export is mounted three times
    assert [(m.mountpoint, m.fstype, m.protocol) for m in mounts] == [
        ("/mnt/nfs/test", "nfs4", "tcp"),
        ("/mnt/nfs/test-dupe", "nfs4", "tcp"),
        ("/mnt/nfs/test-dupe", "nfs", "udp"),
    ]
    for m in mounts:
        assert m.export == "192.168.1.1:/srv/test"
        assert m.read_bytes == 1207640230  # bytes: 1st
        assert m.server_read_bytes == 1210214218  # bytes: 5th
        assert m.read_ops == 1298
        assert m.read_rtt_seconds == 79.386
        assert m.read_exe_seconds == 79.407


def test_procfs_fixture(kernel_fixtures):
    text = (kernel_fixtures / "procfs" / "proc" / "26231" / "mountstats").read_text()
    parsed = parse_mountstats(text)
    assert parsed.malformed == 0
    assert [(m.mountpoint, m.export, m.protocol) for m in parsed.value] == [
        ("/mnt/nfs/test", "192.168.1.1:/srv/test", "tcp")
    ]


def test_statvers_10_and_11_udp_rdma_and_escapes():
    text = (
        "device /dev/vda1 mounted on / with fstype ext4\n"
        "device ossfs mounted on /mnt/oss with fstype fuse.ossfs\n"
        + _block(statvers="1.0", fstype="nfs", xprt="udp 832 0 6428 6428 0 12154 0", device="a:/x")
        + _block(mountpoint="/mnt/my\\040data", xprt="rdma 0 0 1 0 0 1 1 0 1 0 0 0 0 0 0 0 0 0 0 0")
        # newer kernels add an errors column to per-op lines
        + _block(mountpoint="/mnt/three", read="7 7 0 800 4100 3 250 260 0")
    )
    parsed = parse_mountstats(text)
    assert parsed.malformed == 0
    a, b, c = parsed.value
    assert (a.export, a.fstype, a.protocol) == ("a:/x", "nfs", "udp")
    assert b.mountpoint == "/mnt/my data" and b.protocol == "rdma"
    for m in parsed.value:
        assert (m.read_bytes, m.server_read_bytes, m.read_ops) == (100, 4000, 7)
        assert (m.read_rtt_seconds, m.read_exe_seconds) == (0.25, 0.26)
    assert c.mountpoint == "/mnt/three"


def test_truncated_or_garbled_blocks_are_dropped_and_counted_once():
    text = (
        _block(mountpoint="/ok")
        + _block(mountpoint="/no-read", read=None)  # file cut before the per-op section
        + _block(mountpoint="/no-bytes", bytes_=None)
        + _block(mountpoint="/bad-bytes", bytes_="1 2 x 4 5 6 7 8")
        + _block(mountpoint="/short-read", read="7 7 0 800")
        + "device garbage line\n"
        + _block(mountpoint="/no-stats", statvers=None)  # no counters yet: skipped, not an error
        + _block(mountpoint="/ok2")
    )
    parsed = parse_mountstats(text)
    assert [m.mountpoint for m in parsed.value] == ["/ok", "/ok2"]
    assert parsed.malformed == 5


def test_truncated_mid_file_keeps_complete_blocks():
    text = _block(mountpoint="/a") + _block(mountpoint="/b")
    cut = text[: text.index("READ:", text.index("/b"))]
    parsed = parse_mountstats(cut)
    assert [m.mountpoint for m in parsed.value] == ["/a"]
    assert parsed.malformed == 1


def test_unescape():
    assert unescape("/a\\040b\\011c\\134d") == "/a b\tc\\d"
    assert unescape("/plain") == "/plain"
