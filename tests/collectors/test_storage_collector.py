"""StorageCollector on fixture trees, on trees the test writes, and on this machine's /proc."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.config import parse_config
from agent.sources import SourceAbsent
from agent.sources.storage.collector import StorageCollector

DEFAULT_EXCLUDE = parse_config({}).storage.device_exclude


def _nfs(mountpoint: str, export: str, server_read: int, proto: str = "tcp") -> str:
    return (
        f"device {export} mounted on {mountpoint} with fstype nfs4 statvers=1.1\n"
        f"\tbytes:\t10 0 0 0 {server_read} 0 0 0\n"
        f"\txprt:\t{proto} 0 0 0 0 0 0 0 0 0 0 0 0\n"
        "\tper-op statistics\n"
        "\t        READ: 3 3 0 100 200 1 20 30\n"
    )


def _tree(tmp_path: Path, diskstats: str | None, mountstats: str | None, pid: str = "4321") -> Path:
    proc = tmp_path / "proc"
    (proc / pid).mkdir(parents=True)
    os.symlink(pid, proc / "self")  # as on a live system
    if diskstats is not None:
        (proc / "diskstats").write_text(diskstats)
    if mountstats is not None:
        (proc / pid / "mountstats").write_text(mountstats)
    return proc


DISKS = "\n".join(
    f"   8 {i} {name} 100 0 {i + 1}0 5 0 0 0 0 0 9 9"
    for i, name in enumerate(
        [
            "sda",
            "sda1",
            "loop0",
            "ram1",
            "zram0",
            "dm-0",
            "sr0",
            "nvme0n1",
            "nvme0n1p1",
            "vdb",
            "md0",
            "md0p1",
        ]
    )
)


def test_default_exclude_keeps_whole_disks_only(tmp_path):
    proc = _tree(tmp_path, DISKS, None)
    part = StorageCollector(str(proc), DEFAULT_EXCLUDE).collect()
    assert [d.device for d in part.disks] == ["sda", "nvme0n1", "vdb", "md0"]
    assert part.disks[0].read_bytes == 10 * 512
    assert part.nfs == ()


def test_custom_exclude(tmp_path):
    proc = _tree(tmp_path, DISKS, None)
    part = StorageCollector(str(proc), r"^(loop|ram|zram)").collect()
    assert "dm-0" in [d.device for d in part.disks] and "sda1" in [d.device for d in part.disks]
    assert "loop0" not in [d.device for d in part.disks]


def test_nfs_mounts_same_export_twice_and_stacked_mounts(tmp_path):
    text = (
        "device /dev/vda1 mounted on / with fstype ext4\n"
        + _nfs("/mnt/a", "nas:/data", 100)
        + _nfs("/mnt/b", "nas:/data", 200)  # same export, second mountpoint: its own series
        + _nfs("/mnt/c", "old:/x", 300)
        + _nfs("/mnt/c", "new:/y", 400, "rdma")  # mounted over /mnt/c: only this one is reachable
    )
    proc = _tree(tmp_path, DISKS, text)
    part = StorageCollector(str(proc), DEFAULT_EXCLUDE).collect()
    assert [(m.mountpoint, m.export, m.server_read_bytes) for m in part.nfs] == [
        ("/mnt/a", "nas:/data", 100),
        ("/mnt/b", "nas:/data", 200),
        ("/mnt/c", "new:/y", 400),
    ]
    assert part.nfs[2].protocol == "rdma"


def test_mountstats_of_another_pid(tmp_path):
    proc = _tree(tmp_path, DISKS, None)
    (proc / "1").mkdir()
    (proc / "1" / "mountstats").write_text(_nfs("/host/nas", "nas:/d", 5))
    assert StorageCollector(str(proc), DEFAULT_EXCLUDE).collect().nfs == ()
    part = StorageCollector(str(proc), DEFAULT_EXCLUDE, mountstats_pid="1").collect()
    assert [m.mountpoint for m in part.nfs] == ["/host/nas"]


def test_malformed_lines_are_counted_per_read_and_in_total(tmp_path):
    proc = _tree(tmp_path, DISKS + "\n8 0 broken 1 2\ngarbage\n", _nfs("/m", "e:/x", 1) + "device junk\n")
    c = StorageCollector(str(proc), DEFAULT_EXCLUDE)
    first = c.collect()
    assert first.malformed_lines == 3 and first.malformed_lines_total == 3
    assert len(first.disks) == 4 and len(first.nfs) == 1  # the good lines are all kept
    second = c.collect()
    assert second.malformed_lines == 3 and second.malformed_lines_total == 6


def test_missing_sources(tmp_path):
    proc = _tree(tmp_path, None, None)
    with pytest.raises(SourceAbsent):
        StorageCollector(str(proc), DEFAULT_EXCLUDE).collect()
    (proc / "4321" / "mountstats").write_text("")  # NFS-less node without diskstats: still a part
    assert StorageCollector(str(proc), DEFAULT_EXCLUDE).collect().disks == ()


def test_empty_and_huge_files(tmp_path):
    proc = _tree(tmp_path, "", "")
    part = StorageCollector(str(proc), DEFAULT_EXCLUDE).collect()
    assert part.disks == () and part.nfs == () and part.malformed_lines == 0
    (proc / "diskstats").write_text(("8 0 sda " + "1 " * 11 + "\n") * 200_000 + "x" * 5_000_000)
    part = StorageCollector(str(proc), DEFAULT_EXCLUDE).collect()
    assert len(part.disks) == 200_000 and part.malformed_lines == 1


def test_fixture_trees(kernel_fixtures):
    for tree, pid in (("node_exporter", "10"), ("procfs", "26231")):
        proc = kernel_fixtures / tree / "proc"
        part = StorageCollector(str(proc), DEFAULT_EXCLUDE, mountstats_pid=pid).collect()
        assert part.malformed_lines == 0
        assert [d.device for d in part.disks] == ["sda", "mmcblk0", "vda", "nvme0n1", "sdb", "sdc"]
        assert part.nfs and all(m.export == "192.168.1.1:/srv/test" for m in part.nfs)


def test_this_machine():
    part = StorageCollector("/proc", DEFAULT_EXCLUDE).collect()
    assert part.malformed_lines == 0
    with open("/proc/diskstats") as f:
        names = {line.split()[2] for line in f if line.strip()}
    assert {d.device for d in part.disks} <= names
