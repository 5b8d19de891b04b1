"""How many series the step figures and the verdict's info add to a large node's /metrics.

    .venv/bin/python bench/step_series.py

The large node of ``bench/rss.py`` and ``bench/telemetry_tick.py`` (8 fake GPUs through the real NVML
binding, 16 disks, 20 NFS mounts, 8 NICs, 4 RDMA ports, 456 processes), one agent on it with the
classifier's verdict coming in seconds, and 8 training processes (one per GPU, a data-parallel job)
reporting their steps as ``guard.step()`` does. Counts the sample lines of one scrape: the families
this work added (``training_node_train_*``, ``training_node_verdict_info``) against all the others.
Goal: growth <= 10%.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent_overhead import wait_http  # noqa: E402
from benchlib import free_port  # noqa: E402
from telemetry_tick import FAKE_NVML, build_tree  # noqa: E402

NEW = ("training_node_train_", "training_node_verdict_info")
GOAL = 0.10
RANKS = 8


def write_reports(reqdir: Path, pids: list[int]) -> None:
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    for rank, pid in enumerate(pids):
        body = {
            "kind": "steps", "pid": pid, "rank": rank, "local_rank": rank, "world_size": 16, "job": "8812",
            "count": 1200, "sum": 600.0, "time": now,
            "period": {"count": 10, "sum": 5.0, "p50": 0.5, "p90": 0.52, "p99": 0.6, "max": 0.61},
        }  # fmt: skip
        tmp = reqdir / f".steps-{pid}.json"
        tmp.write_text(json.dumps(body))
        tmp.rename(reqdir / f"steps-{pid}.json")


def series(text: str) -> tuple[int, int, dict[str, int]]:
    old = new = 0
    by: dict[str, int] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.startswith(NEW):
            new += 1
            by[name] = by.get(name, 0) + 1
        else:
            old += 1
    return old, new, by


def main() -> int:
    if not FAKE_NVML.exists():
        raise SystemExit(f"{FAKE_NVML} not found: make fakenvml")
    tmp = Path(tempfile.mkdtemp(prefix="tna-series-"))
    node = tmp / "node"
    build_tree(node, gpus=8)
    port = free_port()
    reqdir = tmp / "run" / "checkpoint"
    reqdir.mkdir(parents=True)
    cfg = tmp / "agent.toml"
    cfg.write_text(
        f'[agent]\ninterval = "500ms"\nstate_dir = "{tmp}/state"\nruntime_dir = "{tmp}/run"\n'
        f'log_level = "warning"\nprocfs = "{node}/proc"\nsysfs = "{node}/sys"\n'
        f'[gpu]\nlibrary = "{FAKE_NVML}"\n[http]\nlisten = "127.0.0.1:{port}"\n'
        f'control_socket = "{tmp}/run/control.sock"\n[trainer]\ndiscovery_file = "{tmp}/run/agent.json"\n'
        '[preemption]\nprovider = "none"\n'
        '[classifier]\nwindow = "2s"\nevaluate_every = "1s"\nconfirmations = 1\n'
        'warmup = "0s"\nsustain = "0s"\n'
    )
    trainers = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]) for _ in range(RANKS)
    ]
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'client'}",
        "FAKE_NVML_STATE": str(node / "gpus.json"),
    }
    agent = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "--config", str(cfg)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_http(url, timeout=60)
        deadline = time.monotonic() + 90
        while True:
            write_reports(reqdir, [t.pid for t in trainers])
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            old, new, by = series(text)
            if by.get("training_node_verdict_info") and by.get("training_node_train_rank_info") == RANKS:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"no verdict or step figures after 90 s: {by}")
            time.sleep(2)
    finally:
        agent.terminate()
        agent.wait(10)
        for t in trainers:
            t.kill()
            t.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"large node (8 GPUs, {RANKS} reporting ranks): {old} series before, {new} new, {old + new} after")
    for name, n in sorted(by.items()):
        print(f"  {name}: {n}")
    growth = new / old
    print(f"growth {growth:.1%} (goal <= {GOAL:.0%}): {'met' if growth <= GOAL else 'MISSED'}")
    return 0 if growth <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
