"""The daemon's resident memory, idle and on a large node, side by side with node_exporter's, in one run.

    .venv/bin/python bench/rss.py                       # this checkout
    .venv/bin/python bench/rss.py --compare ../main     # and another checkout's agents, in the same run

Starts, at once and each as the service runs (``python -m agent run``, 1 s interval, no scrapes):
- the idle agent: this box as it is, no GPUs;
- the large-node agent: the synthetic node of ``bench/telemetry_tick.py`` (8 fake GPUs through the
  real NVML binding, 16 disks, 20 NFSv4.1 mounts, 8 NICs, 4 RDMA ports, 128 CPUs, 456 processes);
- prometheus-node-exporter with its default collectors on a free loopback port.
Each process's VmRSS is read once a second; a figure is taken once it has been flat (within 64 KiB)
for 5 s after 10 s of running (at most ``--max-seconds``), then again after 20 scrapes of /metrics.
The agents run under ``-X importtime``, whose lines on stderr count the modules each one imported over
its life (what it loads lazily at its first tick included).

Then the floor: one more interpreter imports exactly the modules the idle agent imported that are not
the agent's own (the standard library, aiohttp, pydantic, structlog, prometheus-client ...), defines
one pydantic model (pydantic builds its machinery at the first), and idles. The idle agent's RSS over
that is what the agent's own code and data cost.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent_overhead import rss_bytes, wait_http  # noqa: E402
from benchlib import free_port  # noqa: E402
from telemetry_tick import FAKE_NVML, build_tree  # noqa: E402

IDLE_GOAL_MB = 50.0
LARGE_GOAL_MB = 56.0
FLAT_BYTES = 64 * 1024
FLAT_SECONDS = 5
MIN_SECONDS = 10
OWN = ("agent", "tna_client", "__main__")

# imports the modules named on stdin (rich blocked: structlog would take it, the agent never does),
# then says so and idles until stdin closes
FLOOR = """
import importlib, sys
sys.modules["rich"] = None
for name in sys.stdin.readline().split():
    try:
        importlib.import_module(name)
    except Exception:
        pass
from pydantic import BaseModel
class One(BaseModel):
    x: int = 1
One()
print(len(sys.modules), flush=True)
sys.stdin.read()
"""


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    url: str | None
    importtime: Path | None = None
    samples: list[int] = field(default_factory=list)

    def settled(self) -> bool:
        tail = self.samples[-FLAT_SECONDS:]
        return len(self.samples) >= MIN_SECONDS and max(tail) - min(tail) <= FLAT_BYTES

    def imported(self) -> list[str]:
        if self.importtime is None:
            return []
        lines = self.importtime.read_text(errors="replace").splitlines()
        rows = [ln.split("|")[-1] for ln in lines if ln.startswith("import time:") and "self [us]" not in ln]
        return [r.strip() for r in rows if r.strip()]


def agent_config(tmp: Path, name: str, port: int, node: Path | None) -> Path:
    text = (
        f'[agent]\ninterval = "1s"\nstate_dir = "{tmp}/{name}/state"\nruntime_dir = "{tmp}/{name}/run"\n'
        'log_level = "warning"\nlog_format = "json"\n'
    )
    if node is not None:
        text += f'procfs = "{node}/proc"\nsysfs = "{node}/sys"\n[gpu]\nlibrary = "{FAKE_NVML}"\n'
    text += (
        f'[http]\nlisten = "127.0.0.1:{port}"\ncontrol_socket = "{tmp}/{name}/run/control.sock"\n'
        f'[trainer]\ndiscovery_file = "{tmp}/{name}/run/agent.json"\n'
        '[preemption]\nprovider = "none"\n'
    )
    path = tmp / f"{name}.toml"
    path.write_text(text)
    return path


def start_agent(tree: Path, tmp: Path, name: str, node: Path | None) -> Proc:
    port = free_port()
    cfg = agent_config(tmp, name, port, node)
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'client'}"}
    if node is not None:
        env["FAKE_NVML_STATE"] = str(node / "gpus.json")
    log = tmp / f"{name}.stderr"
    with log.open("wb") as err:
        p = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "agent", "run", "--config", str(cfg)],
            cwd=tree,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    return Proc(name, p, f"http://127.0.0.1:{port}", log)


def start_floor(modules: list[str]) -> Proc:
    env = {**os.environ, "FROZENLIST_NO_EXTENSIONS": "1"}  # as `run` sets it
    pipe = subprocess.PIPE
    p = subprocess.Popen([sys.executable, "-c", FLOOR], stdin=pipe, stdout=pipe, env=env)
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(" ".join(m for m in modules if m.partition(".")[0] not in OWN).encode() + b"\n")
    p.stdin.flush()
    p.stdout.readline()  # imported
    return Proc("floor", p, None)


def settle(procs: list[Proc], max_seconds: float) -> None:
    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline:
        for p in procs:
            p.samples.append(rss_bytes(p.popen.pid))
        if all(p.settled() for p in procs):
            return
        time.sleep(1)
    print(f"(not every process was flat after {max_seconds:.0f} s: the last reading is shown)")


def check_large_node(p: Proc) -> str:
    """What the agent says it reads: the figure is only the large node's if it reads all of it."""
    snap = json.loads(urllib.request.urlopen(f"{p.url}/api/v1/status", timeout=10).read())["snapshot"]
    kinds = ("gpus", "disks", "nfs", "nics", "rdma")
    return ", ".join(f"{len(snap.get(k) or [])} {k}" for k in kinds)


def stop(procs: list[Proc]) -> None:
    for p in procs:
        if p.popen.stdin is not None:
            p.popen.stdin.close()
        p.popen.terminate()
    for p in procs:
        try:
            p.popen.wait(10)
        except subprocess.TimeoutExpired:
            p.popen.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=REPO, help="the checkout whose agents run (default: this)")
    ap.add_argument("--compare", type=Path, help="also run this checkout's two agents in the same run")
    ap.add_argument("--max-seconds", type=float, default=90.0, help="give up waiting for flat RSS after this")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    ne_bin = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if not ne_bin:
        raise SystemExit("prometheus-node-exporter not found: apt-get install prometheus-node-exporter")
    if not FAKE_NVML.exists():
        raise SystemExit(f"{FAKE_NVML} not found: make fakenvml")

    tmp = Path(tempfile.mkdtemp(prefix="tna-rss-"))
    node = tmp / "node"
    build_tree(node, gpus=8)
    trees = [("", args.tree.resolve())] + ([("before-", args.compare.resolve())] if args.compare else [])
    procs: list[Proc] = []
    try:
        for label, tree in trees:
            procs.append(start_agent(tree, tmp, f"{label}idle", None))
            procs.append(start_agent(tree, tmp, f"{label}large", node))
        ne_port = free_port()
        ne = subprocess.Popen(
            [ne_bin, f"--web.listen-address=127.0.0.1:{ne_port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(Proc("node_exporter", ne, f"http://127.0.0.1:{ne_port}"))
        for p in procs:
            wait_http(f"{p.url}/metrics", timeout=60)
        settle(procs, args.max_seconds)
        procs.append(start_floor(procs[0].imported()))
        settle(procs[-1:], args.max_seconds)
        idle_rss = {p.name: p.samples[-1] for p in procs}
        for p in procs:
            for _ in range(20 if p.url else 0):
                urllib.request.urlopen(f"{p.url}/metrics", timeout=10).read()
        scraped_rss = {p.name: rss_bytes(p.popen.pid) for p in procs if p.url}
        seen = {p.name: check_large_node(p) for p in procs if p.name.endswith("large")}
    finally:
        stop(procs)
        modules = {p.name: len(p.imported()) for p in procs if p.importtime}
        shutil.rmtree(tmp, ignore_errors=True)

    mb, ne_rss = 1e6, idle_rss["node_exporter"]
    print(f"\n{'':14}{'RSS settled (MB)':>18}{'after 20 scrapes':>18}{'modules':>9}{'/ node_exporter':>17}")
    for name, rss in idle_rss.items():
        scraped = f"{scraped_rss[name] / mb:.1f}" if name in scraped_rss else "-"
        print(f"{name:14}{rss / mb:>18.1f}{scraped:>18}{modules.get(name, '-'):>9}{rss / ne_rss:>17.2f}")
    over = (idle_rss["idle"] - idle_rss["floor"]) / mb
    print(
        f"\nthe idle agent over its dependencies' floor: {over:.1f} MB "
        "(the floor imports what it imported, the agent's own modules left out)"
    )
    for name, what in seen.items():
        print(f"({name}: the agent reads {what})")
    goals = [
        (f"idle agent <= {IDLE_GOAL_MB:.0f} MB", idle_rss["idle"] / mb <= IDLE_GOAL_MB),
        (f"large-node agent <= {LARGE_GOAL_MB:.0f} MB", idle_rss["large"] / mb <= LARGE_GOAL_MB),
    ]
    print()
    for goal, ok in goals:
        print(f"  [{'met' if ok else 'MISSED'}] {goal}")
    if args.json:
        fig: dict[str, dict[str, float]] = {}
        for name, rss in idle_rss.items():
            fig[name] = {"rss_mb": round(rss / mb, 2)}
            if name in scraped_rss:
                fig[name]["scraped_rss_mb"] = round(scraped_rss[name] / mb, 2)
            if name in modules:
                fig[name]["modules"] = modules[name]
        Path(args.json).write_text(json.dumps(fig, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
