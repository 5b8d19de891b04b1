"""The real daemon's /metrics against node_exporter on the same real kernel files: its expected
output shipped with the fixtures, and node_exporter itself run on the same trees.

Series present on both sides must be equal. Where the two differ by design, the test says how and
checks that instead of skipping the series:

- NFS: node_exporter keys mounts by (export, protocol) and keeps the first mount it meets; the
  agent keys them by (mountpoint, export), so one export mounted at two paths is two series. Our
  series are matched to node_exporter's through ``training_node_nfs_mount_info``'s protocol, and the
  first one in mountstats order must equal node_exporter's.
- InfiniBand: the agent prefers the 64-bit ``counters_ext/*_64`` files (the 32-bit ones saturate);
  node_exporter reports those as ``node_infiniband_legacy_data_*`` and the 32-bit ones as
  ``node_infiniband_port_data_*``. Each of our ports is compared with the family that reads the
  file we read.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import free_port, http_get, need_binary
from prometheus_client.parser import text_string_to_metric_families

# node_exporter 1.x's default --collector.diskstats.device-exclude, so both sides list the same disks
NE_DISK_EXCLUDE = r"^(ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$"
Samples = dict[str, list]


def restored_tree(src: Path, dst: Path) -> Path:
    """The fixture copy keeps the ``proc/self`` link as a file holding the link's target (the
    README calls it a link, as on a live system): make it a link again, in a tree of our own."""
    (dst / "proc").mkdir(parents=True)
    for entry in (src / "proc").iterdir():
        if entry.name == "self" and entry.is_file() and not entry.is_symlink():
            os.symlink(entry.read_text().strip(), dst / "proc" / "self")
        else:
            os.symlink(entry, dst / "proc" / entry.name)
    os.symlink(src / "sys", dst / "sys")
    return dst


def samples(text: str) -> Samples:
    out: Samples = defaultdict(list)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name].append(s)
    return out


def by(s: Samples, name: str, *labels: str) -> dict:
    return {tuple(x.labels[k] for k in labels): x.value for x in s.get(name, [])}


def assert_same(ours: dict, theirs: dict, what: str) -> None:
    assert ours.keys() == theirs.keys(), f"{what}: series differ: ours {sorted(ours)} vs {sorted(theirs)}"
    for k in ours:
        assert math.isclose(ours[k], theirs[k], rel_tol=1e-12), f"{what} {k}: {ours[k]} != {theirs[k]}"


def run_agent(agent_factory, tree: Path, net_exclude: str) -> Samples:
    agent = agent_factory(
        {
            "agent": {"procfs": str(tree / "proc"), "sysfs": str(tree / "sys")},
            "storage": {"device_exclude": NE_DISK_EXCLUDE},
            "network": {"device_exclude": net_exclude},
        }
    )
    return samples(scrape_when_sampled(agent))


def scrape_when_sampled(agent) -> str:
    def ready() -> str | None:
        text = agent.metrics()
        return text if "training_node_rdma_rate_bytes{" in text else None

    return agent.wait_for(ready, what="storage and network families in /metrics")


def compare_disks(ours: Samples, ne: Samples) -> None:
    for mine, theirs in (
        ("training_node_disk_read_bytes_total", "node_disk_read_bytes_total"),
        ("training_node_disk_reads_completed_total", "node_disk_reads_completed_total"),
        ("training_node_disk_read_time_seconds_total", "node_disk_read_time_seconds_total"),
        ("training_node_disk_io_time_seconds_total", "node_disk_io_time_seconds_total"),
    ):
        assert_same(by(ours, mine, "device"), by(ne, theirs, "device"), mine)
    assert len(by(ours, "training_node_disk_read_bytes_total", "device")) >= 6


def compare_nfs(ours: Samples, ne: Samples) -> None:
    proto = {
        (x.labels["mountpoint"], x.labels["export"]): x.labels["protocol"]
        for x in ours["training_node_nfs_mount_info"]
    }
    for mine, theirs, op in (
        ("training_node_nfs_read_bytes_total", "node_mountstats_nfs_total_read_bytes_total", None),
        ("training_node_nfs_application_read_bytes_total", "node_mountstats_nfs_read_bytes_total", None),
        ("training_node_nfs_read_operations_total", "node_mountstats_nfs_operations_requests_total", "READ"),
        (
            "training_node_nfs_read_rtt_seconds_total",
            "node_mountstats_nfs_operations_response_time_seconds_total",
            "READ",
        ),
        (
            "training_node_nfs_read_execute_seconds_total",
            "node_mountstats_nfs_operations_request_time_seconds_total",
            "READ",
        ),
    ):
        grouped: dict[tuple[str, str], list[float]] = defaultdict(list)
        for x in ours[mine]:  # exposition order is mountstats order
            key = (x.labels["mountpoint"], x.labels["export"])
            grouped[(x.labels["export"], proto[key])].append(x.value)
        theirs_s = [x for x in ne[theirs] if op is None or x.labels.get("operation") == op]
        expected = {(x.labels["export"], x.labels["protocol"]): x.value for x in theirs_s}
        assert_same({k: v[0] for k, v in grouped.items()}, expected, mine)
    mounts = {
        (x.labels["mountpoint"], x.labels["export"]) for x in ours["training_node_nfs_read_bytes_total"]
    }
    # one export at two mountpoints: two series
    assert {m for m, e in mounts if e == "192.168.1.1:/srv/test"} == {"/mnt/nfs/test", "/mnt/nfs/test-dupe"}


def compare_infiniband(ours: Samples, ne: Samples, sys: Path) -> None:
    for direction, file64 in (("receive", "port_rcv_data_64"), ("transmit", "port_xmit_data_64")):
        word = "received" if direction == "receive" else "transmitted"
        plain = by(ne, f"node_infiniband_port_data_{word}_bytes_total", "device", "port")
        legacy = by(ne, f"node_infiniband_legacy_data_{word}_bytes_total", "device", "port")
        mine = by(ours, f"training_node_rdma_{direction}_bytes_total", "device", "port")
        assert mine.keys() == plain.keys() and mine
        for dev, port in mine:
            has64 = (sys / "class/infiniband" / dev / "ports" / port / "counters_ext" / file64).is_file()
            expected = legacy[(dev, port)] if has64 else plain[(dev, port)]
            assert mine[(dev, port)] == expected, (direction, dev, port, has64)
            if plain[(dev, port)] == legacy.get((dev, port), plain[(dev, port)]):
                assert mine[(dev, port)] == plain[(dev, port)]
    assert_same(
        by(ours, "training_node_rdma_rate_bytes", "device", "port"),
        by(ne, "node_infiniband_rate_bytes_per_second", "device", "port"),
        "rdma rate",
    )
    assert_same(
        by(ours, "training_node_rdma_transmit_wait_ticks_total", "device", "port"),
        by(ne, "node_infiniband_port_transmit_wait_total", "device", "port"),
        "rdma xmit wait",
    )


def test_agent_matches_node_exporter_expected_output(kernel_fixtures, agent_factory, tmp_path):
    src = kernel_fixtures / "node_exporter"
    tree = restored_tree(src, tmp_path / "tree")
    ours = run_agent(agent_factory, tree, "^lo$")
    expected = samples((src / "e2e-output-subset.txt").read_text())
    compare_disks(ours, expected)
    compare_nfs(ours, expected)
    compare_infiniband(ours, expected, src / "sys")
    # network speed: equal where both have the device; node_exporter's eth0 came from the target of
    # a class/net/eth0 link that the fixture copy stores as a plain file, without its target
    mine = by(ours, "training_node_network_speed_bytes", "device")
    theirs = by(expected, "node_network_speed_bytes", "device")
    for dev in mine.keys() & theirs.keys():
        assert mine[dev] == theirs[dev]
    for dev in theirs.keys() - mine.keys():
        assert not (src / "sys/class/net" / dev[0]).is_dir(), f"{dev} is in the tree, not in /metrics"


@pytest.mark.parametrize("fixture_tree", ["node_exporter", "procfs"])
def test_agent_matches_node_exporter_run_on_the_same_tree(
    kernel_fixtures, agent_factory, tmp_path, fixture_tree
):
    exe = need_binary("prometheus-node-exporter", "prometheus-node-exporter")
    src = kernel_fixtures / fixture_tree
    tree = restored_tree(src, tmp_path / "tree")
    (tmp_path / "udev").mkdir()
    port = free_port()
    ne = subprocess.Popen(
        [
            exe,
            f"--path.procfs={tree / 'proc'}",
            f"--path.sysfs={tree / 'sys'}",
            f"--path.udev.data={tmp_path / 'udev'}",  # not this machine's
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.disable-defaults",
            "--collector.diskstats",
            "--collector.mountstats",
            "--collector.infiniband",
            "--collector.netclass",
            "--collector.netclass.ignore-invalid-speed",
            "--collector.netdev",
            "--no-collector.netdev.netlink",  # read <procfs>/net/dev, not this machine's netlink
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        text = None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and text is None:
            try:
                code, body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
                text = body if code == 200 else None
            except OSError:
                assert ne.poll() is None, ne.stderr.read().decode()
                time.sleep(0.1)
        assert text is not None, "node_exporter did not serve /metrics"
    finally:
        ne.kill()
        ne.wait()
    theirs = samples(text)
    ours = run_agent(agent_factory, tree, "^lo$")  # node_exporter's netdev default
    compare_disks(ours, theirs)
    if by(theirs, "node_scrape_collector_success", "collector")[("mountstats",)] == 1:
        compare_nfs(ours, theirs)
    else:
        # node_exporter 1.5 also needs <pid>/mountinfo, which the procfs tree lacks; it then reports
        # no NFS series at all, so there is nothing to compare
        assert fixture_tree == "procfs" and not (tree / "proc/self/mountinfo").exists()
        assert by(ours, "training_node_nfs_read_bytes_total", "mountpoint", "export")
    compare_infiniband(ours, theirs, src / "sys")
    speed = by(ours, "training_node_network_speed_bytes", "device")
    assert_same(speed, by(theirs, "node_network_speed_bytes", "device"), "network speed")
    assert speed  # dmz and int, or eth0
    for mine, other in (
        ("training_node_network_receive_bytes_total", "node_network_receive_bytes_total"),
        ("training_node_network_transmit_bytes_total", "node_network_transmit_bytes_total"),
        ("training_node_network_receive_packets_total", "node_network_receive_packets_total"),
        ("training_node_network_receive_drop_total", "node_network_receive_drop_total"),
        ("training_node_network_transmit_errors_total", "node_network_transmit_errs_total"),
    ):
        assert_same(by(ours, mine, "device"), by(theirs, other, "device"), mine)


def test_promtool_accepts_the_exposition(kernel_fixtures, agent_factory, tmp_path):
    promtool = need_binary("promtool", "prometheus")
    tree = restored_tree(kernel_fixtures / "procfs", tmp_path / "tree")
    agent = agent_factory({"agent": {"procfs": str(tree / "proc"), "sysfs": str(tree / "sys")}})
    text = scrape_when_sampled(agent)
    res = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert res.stdout + res.stderr == "", res.stdout + res.stderr
