"""CPU per sampling tick of two (or more) checkouts of the agent, run side by side at the same time.

    .venv/bin/python bench/overhead_versions.py --tree /path/to/before --tree . --fake-gpus 8

Each checkout's agent runs as ``python -m agent run`` from its own tree (``PYTHONPATH`` = the tree
and its ``client/``), with the default 1 s interval, no scrapes, no cloud, and the same fake GPUs
(this tree's fake libnvidia-ml.so.1, each agent with its own state file). They run at the same
time, so whatever else the machine does falls on all of them alike; the start order is rotated
between rounds. Reported per checkout: CPU milliseconds per tick over each window after the
warm-up (median and spread of the windows; CPU from each thread's schedstat), and RSS at the end;
then each checkout's ratio to the first one: of the medians, and window by window (the fairer one: both
agents measured over the same seconds).

With ``--one-by-one`` each agent runs alone, one after the other (the order rotated every round):
no agent shares the 2 cores with another, but a slow spell of the machine falls on one of them only,
so take several rounds; "window by window" then pairs windows of different seconds.

    .venv/bin/python bench/overhead_versions.py --tree /path/to/before --tree . --fake-gpus 8 --alternate 0.7

gives the fake GPUs a workload that is no steady one: every GPU computes and spins in a collective
by turns, ``--alternate`` seconds each, with the fake averaging its readings as a real GPU does (all
agents read the same fake). A tick then mixes work and spin, and an agent that reads GPM in windows
inside the tick (issue 32) reads every GPU in windows every tick: its most costly case.

    .venv/bin/python bench/overhead_versions.py --tree /path/to/before --tree . --bench telemetry_tick
    .venv/bin/python bench/overhead_versions.py --tree /path/to/before --tree . --bench agent_overhead

runs each checkout's own ``bench/<name>.py --quick`` instead, all checkouts at the same time (so
whatever else the machine does falls on each alike; ``--one-by-one``: one after the other, the order
rotated every round), and reports the median of each headline figure over the rounds, with each
checkout's ratio to the first one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent_overhead import fake_gpu_env, rss_bytes  # noqa: E402
from benchlib import free_port, thread_cpu_seconds  # noqa: E402

from agent.devtools import fake_nvml  # noqa: E402


def start(tree: Path, tmp: Path, gpus: int, shared: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    tmp.mkdir(parents=True)
    cfg = tmp / "agent.toml"
    cfg.write_text(
        f'[agent]\ninterval = "1s"\nstate_dir = "{tmp}/state"\nruntime_dir = "{tmp}/run"\n'
        f'log_level = "warning"\nlog_format = "json"\n'
        f'[http]\nlisten = "127.0.0.1:{free_port()}"\ncontrol_socket = "{tmp}/run/control.sock"\n'
        '[preemption]\nprovider = "none"\n'
    )
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'client'}"}
    if shared is not None:
        env.update(shared)
    elif gpus:
        env.update(fake_gpu_env(gpus, tmp))
    return subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "--config", str(cfg)],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "agent.log").open("wb"),
    )


class Alternating:
    """``n`` fake H100s that compute and spin by turns, ``seconds`` each, averaged as a real GPU's
    readings are; a thread writes each turn."""

    COMPUTE = {"utilization_gpu": 97, "power_mw": 560_000, "sm_active": 82.0, "tensor_active": 61.0}
    SPIN = {"utilization_gpu": 100, "power_mw": 115_000, "sm_active": 3.0, "tensor_active": 0.0}

    def __init__(self, n: int, tmp: Path, seconds: float) -> None:
        procs = [{"pid": 4242, "used_memory_bytes": 1 << 30}]
        gpus = [fake_nvml.device(i, processes=procs, **self.COMPUTE) for i in range(n)]
        self.fake = fake_nvml.FakeNvml(tmp / "gpus.json", gpus=gpus, averaged=True)
        self.env = {"LD_LIBRARY_PATH": str(fake_nvml.library_dir()), "FAKE_NVML_STATE": str(self.fake.path)}
        self.seconds, self.done = seconds, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        turn = 0
        while not self.done.wait(self.seconds):
            turn += 1
            for d in self.fake.state["devices"]:
                d.update(self.SPIN if turn % 2 else self.COMPUTE)
            self.fake.write()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(5)


def one_round(
    trees: list[Path], gpus: int, warmup: float, windows: int, window: float, alternate: float = 0.0
) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="tna-versions-"))
    shared = Alternating(gpus, tmp, alternate) if alternate and gpus else None
    procs = [start(t, tmp / f"agent{i}", gpus, shared.env if shared else None) for i, t in enumerate(trees)]
    try:
        time.sleep(warmup)
        for p, t in zip(procs, trees, strict=True):
            if p.poll() is not None:
                raise SystemExit(f"{t}: the agent exited ({p.returncode}); see {tmp}")
        per_tick: list[list[float]] = [[] for _ in trees]
        for _ in range(windows):
            before = [thread_cpu_seconds(p.pid) for p in procs]
            t0 = time.monotonic()
            time.sleep(window)
            dt = time.monotonic() - t0
            for i, p in enumerate(procs):
                per_tick[i].append((thread_cpu_seconds(p.pid) - before[i]) / dt * 1000)  # 1 tick a second
        rss = [rss_bytes(p.pid) / 1e6 for p in procs]
    finally:
        if shared is not None:
            shared.stop()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
    return {"per_tick_ms": per_tick, "rss_mb": rss}


# each benchmark's headline figures (keys of its --json output) and the arguments it runs with
BENCHES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "telemetry_tick": (
        (
            "tick_total_ms",
            "sequential_tick_ms",
            "render_all_ms",
            *(f"per_collector_ms.{c}" for c in ("host", "gpu", "storage", "network", "processes")),
        ),
        ("--no-peer",),
    ),
    "agent_overhead": (
        (
            "agent_cpu_ms_per_tick",
            "agent_rss_mb",
            "agent_scrape_p50_ms",
            "agent_scrape_p99_ms",
            "agent_exposition_lines",
        ),
        ("--fake-gpus", "8"),
    ),
}


def bench_rounds(trees: list[Path], name: str, rounds: int, together: bool) -> list[list[dict]]:
    """Each tree's ``bench/<name>.py --quick`` figures, ``rounds`` times, the start order rotated.
    ``agent_overhead`` is this checkout's script run against each tree's agent (``--tree``), so both
    are measured alike; ``telemetry_tick`` runs in-process, so each tree's own."""
    _, extra = BENCHES[name]
    tmp = Path(tempfile.mkdtemp(prefix="tna-versions-"))
    figs: list[list[dict]] = [[] for _ in trees]
    for r in range(rounds):
        running: list[tuple[int, Path, subprocess.Popen[bytes]]] = []
        for k in range(len(trees)):
            i = (r + k) % len(trees)
            t, out = trees[i], tmp / f"{r}-{i}.json"
            env = {**os.environ, "PYTHONPATH": f"{t}{os.pathsep}{t / 'client'}"}
            script = REPO / "bench" / f"{name}.py" if name == "agent_overhead" else t / "bench" / f"{name}.py"
            cmd = [sys.executable, str(script), "--quick", "--json", str(out), *extra]
            if name == "agent_overhead":
                cmd += ["--tree", str(t)]
            running.append((i, out, subprocess.Popen(cmd, cwd=t, env=env, stdout=subprocess.DEVNULL)))
            if not together:
                running[-1][2].wait()
        for i, out, p in running:
            if p.wait() != 0:
                raise SystemExit(f"{trees[i]}: bench/{name}.py failed ({p.returncode})")
            figs[i].append(json.loads(out.read_text()))
    return figs


def report_bench(trees: list[Path], name: str, figs: list[list[dict]]) -> dict:
    keys, _ = BENCHES[name]
    out: dict = {"bench": name, "rounds": len(figs[0]), "trees": [str(t) for t in trees], "figures": {}}
    print(f"{name}, median of {len(figs[0])} rounds each (x: the median of the rounds' ratios to the first")
    print("checkout, each ratio within one round, so a slow spell that hit a whole round cancels out)")
    print(f"{'':28}" + "".join(f"{commit_of(t):>22}" for t in trees))
    for key in keys:
        rounds = [[figure(f, key) for f in fs] for fs in figs]
        meds = [statistics.median(r) for r in rounds]
        ratios = [statistics.median(b / a for a, b in zip(rounds[0], r, strict=True) if a) for r in rounds]
        out["figures"][key] = {"medians": meds, "paired_ratio_median": ratios, "rounds": rounds}
        cells = "".join(f"{m:>12.3f} (x{q:.3f})" for m, q in zip(meds, ratios, strict=True))
        print(f"{key:28}{cells}")
    return out


def figure(fig: dict[str, Any], key: str) -> float:
    """``a.b`` is ``fig["a"]["b"]``."""
    v: Any = fig
    for part in key.split("."):
        v = v[part]
    return float(v)


def commit_of(tree: Path) -> str:
    git = ["git", "-C", str(tree), "log", "-1", "--format=%h"]
    return subprocess.run(git, capture_output=True, text=True).stdout.strip() or tree.name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, help="a checkout (the first is the reference)")
    ap.add_argument("--fake-gpus", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=float, default=20.0)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--window", type=float, default=20.0, help="seconds per measured window")
    ap.add_argument("--alternate", type=float, default=0.0, help="GPUs compute and spin by turns of S s")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--bench", choices=sorted(BENCHES), help="run this benchmark of each checkout instead")
    ap.add_argument(
        "--one-by-one",
        action="store_true",
        help="the checkouts one after the other, the order rotated each round (agents: each alone)",
    )
    args = ap.parse_args()
    trees = [Path(t).resolve() for t in args.tree]
    if args.bench:
        figs = bench_rounds(trees, args.bench, args.rounds, together=not args.one_by_one)
        res = report_bench(trees, args.bench, figs)
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=1))
        return 0
    samples: list[list[float]] = [[] for _ in trees]
    rss: list[list[float]] = [[] for _ in trees]
    for r in range(args.rounds):
        order = trees[r % len(trees) :] + trees[: r % len(trees)]  # rotate who starts first
        for group in [[t] for t in order] if args.one_by_one else [order]:
            res = one_round(group, args.fake_gpus, args.warmup, args.windows, args.window, args.alternate)
            for j, t in enumerate(group):
                i = trees.index(t)
                samples[i] += res["per_tick_ms"][j]
                rss[i].append(res["rss_mb"][j])
    out = []
    ref = statistics.median(samples[0])
    for t, s, m in zip(trees, samples, rss, strict=True):
        med = statistics.median(s)
        # each window against the first checkout's same window: both measured over the same seconds
        paired = [x / y for x, y in zip(s, samples[0], strict=True) if y]
        out.append(
            {
                "tree": str(t),
                "commit": commit_of(t),
                "cpu_ms_per_tick_median": round(med, 2),
                "cpu_ms_per_tick_windows": [round(x, 2) for x in s],
                "rss_mb": [round(x, 1) for x in m],
                "ratio_to_first": round(med / ref, 3),
                "paired_ratio_median": round(statistics.median(paired), 3),
                "paired_ratio_range": [round(min(paired), 3), round(max(paired), 3)],
            }
        )
        print(
            f"{out[-1]['commit']:>9}  CPU/tick {med:6.2f} ms (windows {min(s):.2f}-{max(s):.2f})"
            f"  RSS {statistics.median(m):5.1f} MB  x{med / ref:.3f}"
            f"  (window by window x{statistics.median(paired):.3f}, {min(paired):.2f}-{max(paired):.2f})  {t}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"fake_gpus": args.fake_gpus, "agents": out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
