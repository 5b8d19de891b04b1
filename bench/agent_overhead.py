"""Agent overhead and scrape latency, side by side with prometheus-node-exporter in the same run.

    .venv/bin/python bench/agent_overhead.py               # 10 minutes, 1000 scrapes each
    .venv/bin/python bench/agent_overhead.py --quick       # 30 s, 200 scrapes each

Measures, for the agent at its default 1 s interval (whatever this node has: host, disks, NICs, and
fake GPUs when --fake-gpus N is given) and for node_exporter with its default collectors:
- CPU seconds per sampling tick and share of one core while idle (no scrapes), from /proc/<pid>/stat;
- RSS at the end of the idle period;
- /metrics latency p50/p99 over N sequential scrapes on loopback.
Prints the figures and the agent/node_exporter ratios. ``--tree PATH`` runs another checkout's agent
(the figures of two versions measured by one script); the agent's CPU is its threads' schedstat
(nanoseconds), node_exporter's /proc/<pid>/stat.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchlib import cpu_seconds, free_port, thread_cpu_seconds  # noqa: E402

from agent.devtools import fake_nvml  # noqa: E402


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def scrape_latencies(url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()
        out.append(time.perf_counter() - t0)
    return out


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def fake_gpu_env(n: int, tmp: Path) -> dict[str, str]:
    """``n`` busy H100s from the fake libnvidia-ml.so.1 (built with ``make fakenvml`` if needed)."""
    busy = {
        "utilization_gpu": 95,
        "utilization_memory": 40,
        "memory_used_bytes": 60_000_000_000,
        "power_mw": 600_000,
        "temperature_c": 60,
        "sm_active": 80.0,
        "tensor_active": 60.0,
    }
    nvml = fake_nvml.FakeNvml(tmp / "gpus.json", gpus=[fake_nvml.device(i, **busy) for i in range(n)])
    return {"LD_LIBRARY_PATH": str(fake_nvml.library_dir()), "FAKE_NVML_STATE": str(nvml.path)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="30 s idle, 200 scrapes")
    ap.add_argument("--idle-seconds", type=float, default=600.0)
    ap.add_argument("--scrapes", type=int, default=1000)
    ap.add_argument("--fake-gpus", type=int, default=0, help="give the agent N fake GPUs")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--tree", type=Path, default=REPO, help="the checkout whose agent runs (default: this)")
    args = ap.parse_args()
    if args.quick:
        args.idle_seconds, args.scrapes = 30.0, 200
    ne_bin = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if not ne_bin:
        raise SystemExit("prometheus-node-exporter not found: apt-get install prometheus-node-exporter")

    tmp = Path(tempfile.mkdtemp(prefix="tna-bench-"))
    agent_port, ne_port = free_port(), free_port()
    cfg = tmp / "agent.toml"
    cfg.write_text(
        f'[agent]\ninterval = "1s"\nstate_dir = "{tmp}/state"\nruntime_dir = "{tmp}/run"\n'
        f'log_level = "warning"\nlog_format = "json"\n'
        f'[http]\nlisten = "127.0.0.1:{agent_port}"\ncontrol_socket = "{tmp}/run/control.sock"\n'
        '[preemption]\nprovider = "none"\n'
    )
    tree = args.tree.resolve()
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'client'}"}
    if args.fake_gpus:
        env.update(fake_gpu_env(args.fake_gpus, tmp))
    agent = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "--config", str(cfg)],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ne = subprocess.Popen(
        [ne_bin, f"--web.listen-address=127.0.0.1:{ne_port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{agent_port}/healthz")
        wait_http(f"http://127.0.0.1:{ne_port}/metrics")
        time.sleep(3)  # past start-up work (imports, first NVML init)
        a0, n0, t0 = thread_cpu_seconds(agent.pid), cpu_seconds(ne.pid), time.monotonic()
        status0 = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{agent_port}/api/v1/status").read())
        print(f"idle for {args.idle_seconds:.0f} s (agent samples every 1 s; nobody scrapes)...", flush=True)
        time.sleep(args.idle_seconds)
        a1, n1, t1 = thread_cpu_seconds(agent.pid), cpu_seconds(ne.pid), time.monotonic()
        status1 = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{agent_port}/api/v1/status").read())
        ticks = status1["snapshot"]["seq"] - status0["snapshot"]["seq"]
        wall = t1 - t0
        agent_rss, ne_rss = rss_bytes(agent.pid), rss_bytes(ne.pid)
        agent_cpu_share = (a1 - a0) / wall
        ne_cpu_share = (n1 - n0) / wall
        per_tick_ms = (a1 - a0) / max(1, ticks) * 1000

        print(f"scraping each {args.scrapes} times...", flush=True)
        scrape_latencies(f"http://127.0.0.1:{agent_port}/metrics", 20)  # warm-up
        scrape_latencies(f"http://127.0.0.1:{ne_port}/metrics", 20)
        la = scrape_latencies(f"http://127.0.0.1:{agent_port}/metrics", args.scrapes)
        ln = scrape_latencies(f"http://127.0.0.1:{ne_port}/metrics", args.scrapes)
        series_a = urllib.request.urlopen(f"http://127.0.0.1:{agent_port}/metrics").read().count(b"\n")
        series_n = urllib.request.urlopen(f"http://127.0.0.1:{ne_port}/metrics").read().count(b"\n")
    finally:
        for p in (agent, ne):
            p.terminate()
        for p in (agent, ne):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    fig = {
        "idle_seconds": round(wall, 1),
        "ticks": ticks,
        "fake_gpus": args.fake_gpus,
        "agent_cpu_ms_per_tick": round(per_tick_ms, 3),
        "agent_core_share_pct": round(agent_cpu_share * 100, 3),
        "node_exporter_core_share_idle_pct": round(ne_cpu_share * 100, 3),
        "agent_rss_mb": round(agent_rss / 1e6, 1),
        "node_exporter_rss_mb": round(ne_rss / 1e6, 1),
        "agent_scrape_p50_ms": round(statistics.median(la) * 1000, 3),
        "agent_scrape_p99_ms": round(pct(la, 99) * 1000, 3),
        "node_exporter_scrape_p50_ms": round(statistics.median(ln) * 1000, 3),
        "node_exporter_scrape_p99_ms": round(pct(ln, 99) * 1000, 3),
        "agent_exposition_lines": series_a,
        "node_exporter_exposition_lines": series_n,
    }
    fig["scrape_p99_ratio_agent_over_node_exporter"] = round(
        fig["agent_scrape_p99_ms"] / fig["node_exporter_scrape_p99_ms"], 3
    )
    fig["rss_ratio_agent_over_node_exporter"] = round(agent_rss / max(1, ne_rss), 3)
    print()
    print(f"{'':38}{'agent':>12}{'node_exporter':>16}{'ratio':>9}")
    print(f"{'CPU per sampling tick (ms)':38}{fig['agent_cpu_ms_per_tick']:>12.3f}{'-':>16}{'':>9}")
    print(
        f"{'share of one core, idle (%)':38}{fig['agent_core_share_pct']:>12.3f}"
        f"{fig['node_exporter_core_share_idle_pct']:>16.3f}{'':>9}"
    )
    print(
        f"{'RSS after idle period (MB)':38}{fig['agent_rss_mb']:>12.1f}{fig['node_exporter_rss_mb']:>16.1f}"
        f"{fig['rss_ratio_agent_over_node_exporter']:>9.2f}"
    )
    print(
        f"{'/metrics p50 (ms)':38}{fig['agent_scrape_p50_ms']:>12.3f}"
        f"{fig['node_exporter_scrape_p50_ms']:>16.3f}"
        f"{fig['agent_scrape_p50_ms'] / fig['node_exporter_scrape_p50_ms']:>9.2f}"
    )
    print(
        f"{'/metrics p99 (ms)':38}{fig['agent_scrape_p99_ms']:>12.3f}"
        f"{fig['node_exporter_scrape_p99_ms']:>16.3f}"
        f"{fig['scrape_p99_ratio_agent_over_node_exporter']:>9.2f}"
    )
    print(f"{'exposition lines':38}{series_a:>12}{series_n:>16}")
    goals = [
        ("idle agent <= 0.5% of one core", fig["agent_core_share_pct"] <= 0.5),
        ("RSS <= 60 MB", fig["agent_rss_mb"] <= 60),
        ("scrape p99 no worse than node_exporter's", fig["scrape_p99_ratio_agent_over_node_exporter"] <= 1.0),
    ]
    print()
    for goal, ok in goals:
        print(f"  [{'met' if ok else 'MISSED'}] {goal}")
    if args.json:
        Path(args.json).write_text(json.dumps(fig, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
