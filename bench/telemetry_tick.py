"""CPU per sampling tick on a synthetic GPU training node, with node_exporter on the same files.

    .venv/bin/python bench/telemetry_tick.py            # 300 ticks and 300 node_exporter scrapes
    .venv/bin/python bench/telemetry_tick.py --quick    # 60 of each
    .venv/bin/python bench/telemetry_tick.py --gpu-scaling   # also 1, 2, 4, 8, 16 GPUs

The node is written under a temporary directory: /proc with 16 disks (plus partitions and loop
devices that are excluded), 8 NICs (plus lo and veths), 20 NFSv4.1 mounts among 40 other mounts,
128 CPUs, 8 training processes with 6 data-loader workers each among 400 other processes, and
/sys with the 8 NICs' speeds, 4 mlx5 RDMA ports and the training containers' cgroups. With
build/fakenvml/libnvidia-ml.so.1 present (``make fakenvml``) the agent also reads 8 fake GPUs
through the real NVML binding, each running one of the training processes.

The agent's collectors are built by the daemon's own ``build_collectors`` (``agent/runtime/build.py``)
and run by the real ``Sampler`` (worker threads, rates), back to back. Reported:
- CPU per tick in total (process CPU time over N ticks) and per collector (thread CPU time of its
  ``collect()``), as the median of 5 rounds with the spread (other work on the machine shows up as
  slow rounds); the same collectors called one after the other in one thread, which is their own
  work without the sampler's threads; and one full /proc rescan of the process collector (every 30 s);
- CPU to render /metrics from a snapshot;
- node_exporter 1.x's CPU per scrape with the matching collectors (diskstats, mountstats, netdev,
  netclass, infiniband) on the same tree, from /proc/<pid>/stat over N scrapes, against the agent's
  storage + network collectors plus rendering their families: the peer ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchlib import cpu_seconds, free_port  # noqa: E402
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from agent.config import parse_config  # noqa: E402
from agent.core.logsetup import setup_logging  # noqa: E402
from agent.devtools import fake_nvml  # noqa: E402
from agent.exporter import SnapshotExporter  # noqa: E402
from agent.runtime import build  # noqa: E402
from agent.runtime.sampler import Sampler  # noqa: E402
from agent.sources.gpu.part import GpuPart  # noqa: E402
from agent.sources.network import metrics as network_metrics  # noqa: E402
from agent.sources.network.part import NetworkPart  # noqa: E402
from agent.sources.processes import collector as process_collector  # noqa: E402
from agent.sources.processes.part import ProcessPart  # noqa: E402
from agent.sources.storage import metrics as storage_metrics  # noqa: E402
from agent.sources.storage.part import StoragePart  # noqa: E402

FAKE_NVML = fake_nvml.LIBRARY
GOAL_MS = 5.0
ROUNDS = 5


def words(text: str) -> list[str]:
    return text.split()


NFS4_OPS = words(
    "NULL READ WRITE COMMIT OPEN OPEN_CONFIRM OPEN_NOATTR OPEN_DOWNGRADE CLOSE SETATTR FSINFO RENEW "
    "SETCLIENTID SETCLIENTID_CONFIRM LOCK LOCKT LOCKU ACCESS GETATTR LOOKUP LOOKUP_ROOT REMOVE RENAME "
    "LINK SYMLINK CREATE PATHCONF STATFS READLINK READDIR SERVER_CAPS DELEGRETURN GETACL SETACL "
    "FS_LOCATIONS RELEASE_LOCKOWNER SECINFO FSID_PRESENT EXCHANGE_ID CREATE_SESSION DESTROY_SESSION "
    "SEQUENCE GET_LEASE_TIME RECLAIM_COMPLETE LAYOUTGET GETDEVICEINFO LAYOUTCOMMIT LAYOUTRETURN "
    "SECINFO_NO_NAME TEST_STATEID FREE_STATEID GETDEVICELIST BIND_CONN_TO_SESSION DESTROY_CLIENTID "
    "SEEK ALLOCATE DEALLOCATE LAYOUTSTATS CLONE COPY OFFLOAD_CANCEL LOOKUPP LAYOUTERROR COPY_NOTIFY"
)
IB_COUNTERS = words(
    "VL15_dropped excessive_buffer_overrun_errors link_downed link_error_recovery "
    "local_link_integrity_errors multicast_rcv_packets multicast_xmit_packets port_rcv_constraint_errors "
    "port_rcv_data port_rcv_errors port_rcv_packets port_rcv_remote_physical_errors "
    "port_rcv_switch_relay_errors port_xmit_constraint_errors port_xmit_data port_xmit_discards "
    "port_xmit_packets port_xmit_wait symbol_error unicast_rcv_packets unicast_xmit_packets"
)
MLX5_HW_COUNTERS = words(
    "duplicate_request implied_nak_seq_err lifespan local_ack_timeout_err np_cnp_sent "
    "np_ecn_marked_roce_packets out_of_buffer out_of_sequence packet_seq_err req_cqe_error "
    "req_cqe_flush_error req_remote_access_errors "
    "req_remote_invalid_request resp_cqe_error resp_cqe_flush_error resp_local_length_error "
    "resp_remote_access_errors rnr_nak_retry_err roce_adp_retrans roce_adp_retrans_to roce_slow_restart "
    "roce_slow_restart_cnps roce_slow_restart_trans rp_cnp_handled rp_cnp_ignored rx_atomic_requests "
    "rx_dct_connect rx_icrc_encapsulated rx_read_requests rx_write_requests"
)
TRAINING = 8
WORKERS = 6
OTHER_PROCESSES = 400
FIRST_PID = 1000


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def stat_line(pid: int, comm: str, ppid: int, utime: int, threads: int) -> str:
    return (
        f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 1000 0 0 0 {utime} {utime // 4} 0 0 20 0 "
        f"{threads} 0 {1000 + pid} 1000000000 50000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 "
        "0 0 0 0 0\n"
    )


def training_pids() -> list[int]:
    return [FIRST_PID + i * (WORKERS + 1) for i in range(TRAINING)]


def build_tree(root: Path, gpus: int) -> None:
    proc, sys_ = root / "proc", root / "sys"
    # disks: 8 NVMe and 8 virtio data disks, each with a partition, plus loop and ram devices
    lines = []
    for i in range(8):
        for name, major in ((f"nvme{i}n1", 259), (f"vd{chr(ord('b') + i)}", 254)):
            lines.append(
                f" {major} {i * 16} {name} 4812 0 9624000 2000 800 100 640000 900 0 3000 2900 0 0 0 0 12 3"
            )
            lines.append(
                f" {major} {i * 16 + 1} {name}{'p1' if name[0] == 'n' else '1'} 4800 0 9600000 1990 "
                "800 100 640000 900 0 2990 2890 0 0 0 0 0 0"
            )
    lines += [f"   7 {i} loop{i} 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0" for i in range(8)]
    lines += [f"   1 {i} ram{i} 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0" for i in range(4)]
    write(proc, "diskstats", "\n".join(lines) + "\n")
    # NICs
    nics = [f"eth{i}" for i in range(8)]
    dev = [
        "Inter-|   Receive                                                |  Transmit",
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo "
        "colls carrier compressed",
        "    lo: 1664039048 1566805    0    0    0     0          0         0 1664039048 1566805 0 0 0 0 0 0",
    ]
    dev += [
        f"  {n}: 874354587{i} 1036395 0 0 0 0 0 0 563352563{i} 732147 0 0 0 0 0 0" for i, n in enumerate(nics)
    ]
    dev += [f"veth{i:06x}: 648 8 0 0 0 0 0 0 438 5 0 0 0 0 0 0" for i in range(4)]
    write(proc, "net/dev", "\n".join(dev) + "\n")
    for i, n in enumerate(nics):
        write(sys_, f"class/net/{n}/speed", "-1\n" if i == 0 else "200000\n")  # eth0: virtio, unknown
        write(sys_, f"class/net/{n}/operstate", "up\n")
        write(sys_, f"class/net/{n}/mtu", "9000\n")
    # RDMA: 4 mlx5 ports with the full counter sets a ConnectX-6/7 shows
    for d in range(4):
        ib = f"class/infiniband/mlx5_{d}"
        write(sys_, f"{ib}/board_id", "MT_0000000222\n")
        write(sys_, f"{ib}/fw_ver", "28.39.1002\n")
        write(sys_, f"{ib}/hca_type", "MT4129\n")
        write(sys_, f"{ib}/ports/1/rate", "400 Gb/sec (4X NDR)\n")
        write(sys_, f"{ib}/ports/1/state", "4: ACTIVE\n")
        write(sys_, f"{ib}/ports/1/phys_state", "5: LinkUp\n")
        write(sys_, f"{ib}/ports/1/link_layer", "Ethernet\n")
        for i, c in enumerate(IB_COUNTERS):
            write(sys_, f"{ib}/ports/1/counters/{c}", f"{(d + 1) * 1000003 * (i + 1)}\n")
        for i, c in enumerate(MLX5_HW_COUNTERS):
            write(sys_, f"{ib}/ports/1/hw_counters/{c}", f"{i * 7}\n")
    # mounts: 40 ordinary ones and 20 NFSv4.1 mounts with full per-op statistics
    self_pid = 1
    stats, info = [], []
    for i in range(40):
        mp = f"/var/lib/kubelet/pods/pod{i}/volumes/kubernetes.io~empty-dir/cache"
        stats.append(f"device tmpfs mounted on {mp} with fstype tmpfs")
        info.append(f"{100 + i} 1 0:{50 + i} / {mp} rw,relatime shared:{i} - tmpfs tmpfs rw")
    for i in range(20):
        export, mp = f"10.0.{i}.2:/dataset{i}", f"/mnt/cpfs{i}"
        ops = "\n".join(
            f"\t{op:>20}: {(k + 1) * 1000} {(k + 1) * 1000} 0 {k * 1200} {k * 100000} 3 {k * 90} {k * 95} 0"
            for k, op in enumerate(NFS4_OPS)
        )
        stats.append(
            f"device {export} mounted on {mp} with fstype nfs4 statvers=1.1\n"
            "\topts:\trw,vers=4.1,rsize=1048576,wsize=1048576,namlen=255,acregmin=3,acregmax=60,acdirmin=30,"
            f"acdirmax=60,hard,proto=tcp,nconnect=4,port=0,timeo=600,retrans=2,sec=sys,clientaddr=10.0.{i}.9,"
            "local_lock=none\n"
            "\tage:\t13968\n"
            "\timpl_id:\tname='',domain='',date='0,0'\n"
            "\tcaps:\tcaps=0x3ffbffff,wtmult=512,dtsize=1048576,bsize=0,namlen=255\n"
            "\tnfsv4:\tbm0=0xfdffbfff,bm1=0x40f9be3e,bm2=0x60803,acl=0x3,sessions,pnfs=not configured,"
            "lease_time=90,lease_expired=0\n"
            "\tsec:\tflavor=1,pseudoflavor=1\n"
            "\tevents:\t52 226 0 0 1 13 398 0 0 331 0 47 0 0 77 0 0 77 0 0 0 0 0 0 0 0 0\n"
            f"\tbytes:\t{i}207640230 0 0 0 {i}210214218 0 295483 0\n"
            "\tRPC iostats version: 1.1  p/v: 100003/4 (nfs)\n"
            + "".join("\txprt:\ttcp 832 0 1 0 11 6428 6428 0 12154 0 24 26 5726\n" for _ in range(4))
            + "\tper-op statistics\n"
            + ops
            + "\n"
        )
        info.append(
            f"{200 + i} 1 0:{90 + i} / {mp} rw,relatime shared:{50 + i} - nfs4 {export} rw,vers=4.1,"
            f"addr=10.0.{i}.2"
        )
    write(proc, f"{self_pid}/mountstats", "\n".join(stats) + "\n")
    write(proc, f"{self_pid}/mountinfo", "\n".join(info) + "\n")
    os.symlink(str(self_pid), proc / "self")
    # host
    cpu = " ".join(str(x) for x in (48_000_000, 10_000, 9_000_000, 300_000_000, 200_000, 0, 90_000, 0, 0, 0))
    write(
        proc,
        "stat",
        f"cpu  {cpu}\n"
        + "".join(f"cpu{i} {cpu}\n" for i in range(128))
        + "intr 1 2 3\nctxt 1\nbtime 1700000000\nprocesses 1\nprocs_running 1\nprocs_blocked 0\n",
    )
    write(proc, "loadavg", "40.10 39.00 38.50 60/2000 12345\n")
    write(
        proc,
        "meminfo",
        "MemTotal:       2113494016 kB\nMemFree:        1000000000 kB\nMemAvailable:   1500000000 kB\n",
    )
    for res in ("cpu", "io", "memory"):
        write(
            proc,
            f"pressure/{res}",
            "some avg10=1.00 avg60=1.00 avg300=1.00 total=123456789\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=12345\n",
        )
    # processes: a launcher per GPU with its data-loader workers, among many others
    for i, leader in enumerate(training_pids()):
        tdir = f"{leader}"
        write(proc, f"{tdir}/stat", stat_line(leader, "python", 1, 100000 + i, 64))
        write(
            proc,
            f"{tdir}/io",
            "rchar: 123456789012\nwchar: 0\nsyscr: 1\nsyscw: 1\nread_bytes: 4096\n"
            "write_bytes: 0\ncancelled_write_bytes: 0\n",
        )
        write(proc, f"{tdir}/status", "Name:\tpython\nCpus_allowed_list:\t0-127\n")
        write(proc, f"{tdir}/cgroup", f"0::/kubepods.slice/pod{i}.slice/cri-{i}.scope\n")
        write(sys_, f"fs/cgroup/kubepods.slice/pod{i}.slice/cri-{i}.scope/cpu.max", "1600000 100000\n")
        write(sys_, f"fs/cgroup/kubepods.slice/pod{i}.slice/cpu.max", "max 100000\n")
        write(sys_, "fs/cgroup/kubepods.slice/cpu.max", "max 100000\n")
        for w in range(1, WORKERS + 1):
            pid = leader + w
            write(proc, f"{pid}/stat", stat_line(pid, "pt_data_worker", leader, 50000 + w, 4))
            write(proc, f"{pid}/io", f"rchar: {w}23456789\nwchar: 0\nread_bytes: {w}4096\n")
    for k in range(OTHER_PROCESSES):
        pid = 20000 + k
        write(proc, f"{pid}/stat", stat_line(pid, f"proc{k}", 1 + (k % 7) * 0, 10 + k, 1))
    if gpus:
        devices = [
            fake_nvml.device(
                i,
                utilization_gpu=95,
                utilization_memory=40,
                memory_used_bytes=60 * fake_nvml.GIB,
                power_mw=600_000,
                temperature_c=60,
                pcie_tx_bytes=10**12,
                pcie_rx_bytes=10**12,
                nvlink_tx_kib=10**9,
                nvlink_rx_kib=10**9,
                sm_active=80.0,
                tensor_active=60.0,
                processes=[{"pid": training_pids()[i % TRAINING], "used_memory_bytes": 60 * fake_nvml.GIB}],
            )
            for i in range(gpus)
        ]
        write(root, "gpus.json", json.dumps(fake_nvml.state(devices)))


class Timed:
    """Wraps a collector's ``collect`` to add up the CPU time of its own thread."""

    def __init__(self, collector) -> None:
        self.c = collector
        self.name, self.part = collector.name, collector.part
        self.cpu = 0.0
        self.calls = 0

    def collect(self):
        t0 = time.thread_time()
        try:
            return self.c.collect()
        finally:
            self.cpu += time.thread_time() - t0
            self.calls += 1

    def close(self) -> None:
        self.c.close()


def measure_agent(root: Path, gpus: int, ticks: int) -> dict:
    if gpus:
        os.environ["FAKE_NVML_STATE"] = str(root / "gpus.json")
    cfg = parse_config(
        {
            "agent": {"procfs": str(root / "proc"), "sysfs": str(root / "sys"), "collector_timeout": "30s"},
            "gpu": {"enabled": bool(gpus), "library": str(FAKE_NVML) if gpus else ""},
        }
    )
    sampler: Sampler | None = None
    collectors: list[Timed] = [Timed(c) for c in build.build_collectors(cfg, lambda: sampler.latest)]
    sampler = Sampler(collectors, interval=1.0, timeout=30.0, stall_after=600.0)

    async def run() -> list[tuple[float, dict[str, float], float]]:
        """Per round: CPU ms per tick in total and per collector through the sampler, and CPU ms
        per tick of the same collectors called one after the other in this thread."""
        for _ in range(5):  # warm-up: NVML init, first full /proc scan, caches
            await sampler.tick()
        out = []
        n = max(1, ticks // ROUNDS)
        for _ in range(ROUNDS):
            for c in collectors:
                c.cpu, c.calls = 0.0, 0
            t0 = time.process_time()
            for _ in range(n):
                await sampler.tick()
            total = (time.process_time() - t0) / n * 1000
            per = {c.name: c.cpu / n * 1000 for c in collectors}
            t0 = time.process_time()
            for _ in range(n):
                for c in collectors:
                    c.c.collect()
            out.append((total, per, (time.process_time() - t0) / n * 1000))
        return out

    rounds = sorted(asyncio.run(run()), key=lambda r: r[0])
    median = rounds[len(rounds) // 2]
    sequential = sorted(r[2] for r in rounds)
    snap = sampler.latest
    failed = {n: s.error for n, s in snap.collectors.items() if not s.success}
    if failed:
        raise SystemExit(f"collectors failed on the synthetic tree: {failed}")
    gpu, storage = snap.part(GpuPart), snap.part(StoragePart)
    network, procs = snap.part(NetworkPart), snap.part(ProcessPart)
    assert storage is not None and network is not None and procs is not None, "a source had no part"
    counts = {
        "gpus": len(gpu.gpus) if gpu else 0,
        "disks": len(storage.disks),
        "nfs_mounts": len(storage.nfs),
        "nics": len(network.nics),
        "rdma_ports": len(network.rdma),
        "training_processes": len(procs.processes),
        "their_descendants": sum(p.descendants for p in procs.processes),
    }
    # one full /proc rescan of the process collector, which happens every RESCAN_SECONDS
    proc = next(c.c for c in collectors if c.name == "processes")
    proc._rescan_at = 0.0
    t0 = time.process_time()
    proc._children()
    rescan = time.process_time() - t0

    def render_cpu(renderers, n: int = 200) -> float:
        reg = CollectorRegistry(auto_describe=False)
        reg.register(SnapshotExporter(lambda: snap, renderers))
        generate_latest(reg)
        t0 = time.process_time()
        for _ in range(n):
            generate_latest(reg)
        return (time.process_time() - t0) / n

    out = {
        "ticks": ticks,
        **counts,
        # rounds differ by what else the machine runs: the median round, and the spread
        "tick_total_ms": median[0],
        "tick_total_min_ms": rounds[0][0],
        "tick_total_max_ms": rounds[-1][0],
        "per_collector_ms": median[1],
        "rounds_tick_ms": [r[0] for r in rounds],
        # the collectors' own work, without the sampler's threads (GIL hand-offs on every read)
        "sequential_tick_ms": sequential[len(sequential) // 2],
        "sequential_min_ms": sequential[0],
        "process_rescan_ms": rescan * 1000,
        "process_rescan_per_tick_ms_at_1s": rescan * 1000 / process_collector.RESCAN_SECONDS,
        "render_all_ms": render_cpu(build.build_renderers(cfg)) * 1000,
        "render_storage_network_ms": render_cpu([storage_metrics.render, network_metrics.render]) * 1000,
        "render_network_ms": render_cpu([network_metrics.render]) * 1000,
    }
    sampler.close()
    return out


NE_ALL = ("diskstats", "mountstats", "netdev", "netclass", "infiniband")
NE_NETWORK = ("netdev", "netclass", "infiniband")


def measure_node_exporter(root: Path, scrapes: int, collectors: tuple[str, ...]) -> dict | None:
    exe = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if exe is None:
        print(
            "prometheus-node-exporter not found: no peer figures (apt-get install prometheus-node-exporter)"
        )
        return None
    (root / "udev").mkdir(exist_ok=True)
    port = free_port()
    flags = [f"--collector.{c}" for c in collectors]
    if "netdev" in collectors:
        flags.append("--no-collector.netdev.netlink")  # read <procfs>/net/dev like the agent
    ne = subprocess.Popen(
        [exe, f"--path.procfs={root / 'proc'}", f"--path.sysfs={root / 'sys'}",
         f"--path.udev.data={root / 'udev'}", f"--web.listen-address=127.0.0.1:{port}",
         "--collector.disable-defaults", *flags],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("node_exporter did not come up") from None
                time.sleep(0.1)
        for _ in range(20):
            body = urllib.request.urlopen(url, timeout=10).read().decode()
        failed = [
            ln
            for ln in body.splitlines()
            if ln.startswith("node_scrape_collector_success") and ln.endswith(" 0")
        ]
        c0 = cpu_seconds(ne.pid)
        for _ in range(scrapes):
            urllib.request.urlopen(url, timeout=10).read()
        c1 = cpu_seconds(ne.pid)
    finally:
        ne.kill()
        ne.wait()
    return {
        "collectors": collectors,
        "scrapes": scrapes,
        "cpu_per_scrape_ms": (c1 - c0) / scrapes * 1000,
        "exposition_bytes": len(body),
        "failed_collectors": failed,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="60 ticks and 60 scrapes")
    ap.add_argument("--ticks", type=int, default=300)
    ap.add_argument(
        "--gpus", type=int, default=None, help="fake GPUs (default 8 when the fake NVML is built)"
    )
    ap.add_argument("--gpu-scaling", action="store_true", help="also measure 1, 2, 4, 8 and 16 GPUs")
    ap.add_argument("--no-peer", action="store_true", help="skip node_exporter")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    setup_logging("warning", "console")
    ticks = 60 if args.quick else args.ticks
    gpus = args.gpus if args.gpus is not None else (8 if FAKE_NVML.exists() else 0)
    if gpus and not FAKE_NVML.exists():
        raise SystemExit(f"{FAKE_NVML} is missing: run `make fakenvml`")
    tmp = Path(tempfile.mkdtemp(prefix="tna-tick-"))
    try:
        build_tree(tmp, gpus)
        fig = measure_agent(tmp, gpus, ticks)
        peers = {} if args.no_peer else {
            "all": measure_node_exporter(tmp, ticks, NE_ALL),
            "network": measure_node_exporter(tmp, ticks, NE_NETWORK),
        }  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if peers and peers["all"] is not None:
        ms = fig["per_collector_ms"]
        fig["node_exporter"] = peers
        fig["agent_storage_network_ms"] = ms["storage"] + ms["network"] + fig["render_storage_network_ms"]
        fig["agent_network_ms"] = ms["network"] + fig["render_network_ms"]
        fig["peer_ratio_all"] = fig["agent_storage_network_ms"] / peers["all"]["cpu_per_scrape_ms"]
        fig["peer_ratio_network"] = fig["agent_network_ms"] / peers["network"]["cpu_per_scrape_ms"]
    if args.gpu_scaling:
        fig["gpu_scaling"] = {}
        for n in (1, 2, 4, 8, 16):
            out = tmp.with_name(tmp.name + f"-{n}.json")
            subprocess.run([sys.executable, __file__, "--gpus", str(n), "--ticks", str(ticks), "--no-peer",
                            "--json", str(out)], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
            sub = json.loads(out.read_text())
            out.unlink()
            fig["gpu_scaling"][n] = {
                "tick_total_ms": sub["tick_total_ms"],
                "gpu_ms": sub["per_collector_ms"]["gpu"],
            }
    report(fig)
    if args.json:
        Path(args.json).write_text(json.dumps(fig, indent=2))
    return 0


def report(fig: dict) -> None:
    print(
        f"synthetic node: {fig['gpus']} fake GPUs, {fig['disks']} disks, {fig['nics']} NICs, "
        f"{fig['rdma_ports']} RDMA ports, {fig['nfs_mounts']} NFS mounts, {fig['training_processes']} "
        f"training processes with {fig['their_descendants']} workers; {fig['ticks']} ticks"
    )
    print(f"\n{'collector':28}{'CPU ms/tick':>12}")
    for name, ms in fig["per_collector_ms"].items():
        print(f"{name:28}{ms:>12.3f}")
    print(
        f"{'whole tick (sampler incl.)':28}{fig['tick_total_ms']:>12.3f}   goal <= {GOAL_MS} ms: "
        f"{'met' if fig['tick_total_ms'] <= GOAL_MS else 'NOT met'}\n"
        f"(median of {ROUNDS} rounds; whole tick in the rounds: {fig['tick_total_min_ms']:.3f} to "
        f"{fig['tick_total_max_ms']:.3f} ms)"
    )
    print(
        f"the same collectors called one after the other in one thread: {fig['sequential_tick_ms']:.3f} ms "
        f"per tick (fastest round {fig['sequential_min_ms']:.3f} ms)"
    )
    print(
        f"\nprocess collector full /proc rescan: {fig['process_rescan_ms']:.3f} ms every "
        f"{process_collector.RESCAN_SECONDS:.0f} s = {fig['process_rescan_per_tick_ms_at_1s']:.3f} "
        "ms/tick at 1 s"
    )
    print(f"render /metrics (all families): {fig['render_all_ms']:.3f} ms per scrape")
    if "node_exporter" in fig:
        ne = fig["node_exporter"]
        print(f"\nsame files, {ne['all']['scrapes']} node_exporter scrapes; CPU ms (agent: collect + render)")
        print(f"{'sources':44}{'agent':>9}{'node_exporter':>15}{'ratio':>8}")
        for label, ours, key, ratio in (
            (
                "disks, NFS, NICs, RDMA (5 collectors)",
                fig["agent_storage_network_ms"],
                "all",
                fig["peer_ratio_all"],
            ),
            (
                "NICs, RDMA (netdev, netclass, infiniband)",
                fig["agent_network_ms"],
                "network",
                fig["peer_ratio_network"],
            ),
        ):
            print(f"{label:44}{ours:>9.3f}{ne[key]['cpu_per_scrape_ms']:>15.3f}{ratio:>8.2f}")
        print(
            f"node_exporter exposition: {ne['all']['exposition_bytes']} bytes with mountstats (every NFS op "
            f"of every mount), {ne['network']['exposition_bytes']} without"
        )
        for peer in ne.values():
            if peer["failed_collectors"]:
                print(f"  node_exporter collectors that failed on the tree: {peer['failed_collectors']}")
    if "gpu_scaling" in fig:
        print(f"\n{'GPUs':>6}{'tick ms':>10}{'gpu ms':>10}{'gpu ms/GPU':>12}")
        for n, v in fig["gpu_scaling"].items():
            print(f"{n:>6}{v['tick_total_ms']:>10.3f}{v['gpu_ms']:>10.3f}{v['gpu_ms'] / int(n):>12.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
