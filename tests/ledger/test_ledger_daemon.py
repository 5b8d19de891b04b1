"""The ledger in the real daemon: fake GPUs with a real training process on them, the trainer's
periodic checkpoint reports through the request directory, a restart, and reclaims through the
metadata simulator with a periodic checkpoint 10 minutes before (the ledger's state is seeded with
those 10 minutes instead of waiting for them)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import need_binary, run_cli

from agent.devtools.fake_nvml import FakeNvml, device, library_dir
from agent.devtools.simprocess import MetadataSimProcess
from agent.ledger import store
from agent.ledger.assign import BUCKETS
from agent.ledger.book import Book
from agent.ledger.saved import Saved
from agent.ledger.state import Ledger

pytestmark = pytest.mark.slow  # about a minute of real agents

GOODPUT = {
    "resolution": "1s",
    "settle": "1h",
    "save_every": "1s",
    "poll": "200ms",
    "window": "1m",
}


@contextmanager
def trainer_on_gpus(tmp: Path, gpus: int = 2) -> Iterator[tuple[subprocess.Popen, FakeNvml, dict[str, str]]]:
    need_binary("cc", "build-essential")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        nvml = FakeNvml(
            tmp / "nvml.json",
            gpus=[
                device(i, utilization_gpu=97, sm_active=85.0, power_mw=600_000, processes=[{"pid": proc.pid}])
                for i in range(gpus)
            ],
        )
        env = {"LD_LIBRARY_PATH": str(library_dir()), "FAKE_NVML_STATE": str(nvml.path)}
        yield proc, nvml, env
    finally:
        proc.kill()
        proc.wait()


def series(text: str, name: str) -> dict[str, float]:
    out = {}
    for m in re.finditer(rf'^{name}\{{bucket="([a-z-]+)"[^}}]*\}} (\S+)$', text, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def goodput(agent) -> dict:
    return agent.status()["goodput"]


def started_after_a_save(agent_factory, sim: MetadataSimProcess, env: dict[str, str]):
    """An agent watching ``sim``, on a ledger whose last periodic checkpoint was 10 minutes ago:
    the agent and when that save was."""
    agent = agent_factory(
        {
            "goodput": {**GOODPUT, "resolution": "10s"},
            "preemption": {"provider": "alibaba", "endpoint": sim.url, "poll_interval": "200ms"},
            "trainer": {"discover": ["nvml"]},
        },
        env=env,
        start=False,
    )
    saved_at = seed(agent.state_dir, 2, 10)
    agent.start()
    return agent, saved_at


def trainer_seen(agent) -> None:
    """The seeded ledger has observed 30 minutes already: wait for a tick that saw the trainer on
    the GPUs, or a notice can come before it is known (a loaded box's first tick came after one)."""
    agent.wait_for(lambda: agent.status()["snapshot"].get("training_processes"), what="the trainer")


def test_daemon_books_every_gpu_second_prices_it_and_continues_after_a_restart(
    agent_factory, tmp_path
) -> None:
    with trainer_on_gpus(tmp_path) as (_proc, _nvml, env):
        cfg = {"goodput": GOODPUT, "cost": {"currency": "CNY", "instance_hour_price": 36.0}}
        agent = agent_factory(cfg, env=env)
        g = agent.wait_for(
            lambda: (s := goodput(agent))["gpu_seconds"] >= 6 and s, what="6 GPU-seconds booked"
        )
        assert set(g) >= {"since", "window_seconds", "ratio", "buckets", "cost", "cadence", "lines"}
        assert g["buckets"]["productive"] / g["gpu_seconds"] > 0.95, g["buckets"]
        assert g["gpus"] == 2 and g["cost"]["currency"] == "CNY"
        # 36 per instance-hour on 2 GPUs: 0.005 per GPU-second
        assert g["cost"]["total"] == pytest.approx(g["gpu_seconds"] * 0.005, rel=0.05)
        text = agent.metrics()
        settled = series(text, "training_node_gpu_seconds_total")
        unsettled = series(text, "training_node_gpu_seconds_unsettled")
        assert set(settled) == set(BUCKETS) == set(unsettled)
        assert "training_node_goodput_ratio " in text
        assert re.search(r'^training_node_cost_total\{bucket="productive",currency="CNY"\} ', text, re.M)

        # conservation on the live exposition: settled + unsettled = GPUs x booked wall time
        observed = float(
            re.search(r"^training_node_ledger_observed_seconds_total (\S+)$", text, re.M).group(1)
        )
        assert sum(settled.values()) + sum(unsettled.values()) == pytest.approx(2 * observed, rel=1e-6)

        # the trainer reports a periodic checkpoint, and something that is not one
        reqdir = Path(g["request_dir"])
        reqdir.mkdir(parents=True, exist_ok=True)
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        good = {"kind": "saved", "step": 700, "path": "/ckpt/700", "seconds": 1.5, "time": now, "pid": 1}
        (reqdir / ".tmp-1").write_text(json.dumps(good))
        (reqdir / ".tmp-1").rename(reqdir / "saved-1-1.json")
        (reqdir / "saved-1-2.json").write_text('{"kind": "saved", "time": "yesterday"}')
        agent.wait_for(lambda: goodput(agent)["last_step"] == 700, what="the periodic checkpoint recorded")
        agent.wait_for(lambda: (reqdir / "saved-1-2.json.bad").exists(), what="the bad report set aside")
        assert not (reqdir / "saved-1-1.json").exists()
        assert any(
            e.get("event") == "unusable checkpoint report set aside" and "RFC 3339" in e.get("error", "")
            for e in agent.log_lines()
        )
        assert "training_node_checkpoint_save_seconds 1.5" in agent.metrics()

        before = goodput(agent)
        assert agent.stop() == 0
        down = time.monotonic()
        time.sleep(2)
        agent.start()
        agent.wait_for(
            lambda: goodput(agent)["observed_seconds"] > before["observed_seconds"] + 3, what="booking again"
        )
        after = goodput(agent)
        across = time.monotonic() - down
        assert after["last_step"] == 700  # the periodic checkpoint survived the restart
        for b in BUCKETS:
            assert after["totals"][b] >= before["totals"][b] - 1e-6, b
        grown = sum(after["totals"].values()) - sum(before["totals"].values())
        booked = after["observed_seconds"] - before["observed_seconds"]
        # nothing twice: what was added is exactly the new run's booked time, less than the wall time
        assert grown == pytest.approx(2 * booked, abs=0.02)  # status rounds each bucket to 1 ms
        assert booked < across


@pytest.mark.parametrize(
    "cost",
    [{}, {"instance_type": "ecs.gn7i-c8g1.2xlarge", "prices": {"ecs.gn8v.48xlarge": {"on_demand": 200.0}}}],
    ids=["no-price", "no-price-for-this-type"],
)
def test_no_price_means_no_cost_series(agent_factory, tmp_path, cost) -> None:
    with trainer_on_gpus(tmp_path, gpus=1) as (_proc, _nvml, env):
        agent = agent_factory({"goodput": GOODPUT, "cost": cost}, env=env)
        agent.wait_for(lambda: goodput(agent)["gpu_seconds"] > 1, what="GPU-seconds booked")
        text = agent.metrics()
        assert "training_node_gpu_seconds_total" in text
        assert "training_node_cost" not in text
        assert goodput(agent)["cost"] is None


def seed(state_dir: Path, gpus: int, minutes_since_save: float) -> float:
    """The ledger as an agent watching this job for half an hour would have left it: productive work
    on ``gpus`` GPUs up to now, the last periodic checkpoint ``minutes_since_save`` ago."""
    led = Ledger(Book(10.0, 3600.0, 86400.0))
    now = time.time()
    start = now - 1800
    led.gpus, led.job, led.job_since, led.ticks = gpus, True, start, 1
    t = start
    while t < now:
        led.book.record(t + 5, [10.0 * gpus] + [0.0] * (len(BUCKETS) - 1), [0.0] * len(BUCKETS))
        t += 10
    led.observed = 1800
    saved_at = now - minutes_since_save * 60
    led.saved(Saved(time=saved_at, seconds=30.0, step=4000, path="/oss/ckpt-4000", pid=1))
    state_dir.mkdir(parents=True, exist_ok=True)
    store.save(state_dir, led)
    return saved_at


@pytest.mark.parametrize("acked", [False, True], ids=["final-checkpoint-missed", "final-checkpoint-acked"])
def test_simulated_reclaim_ten_minutes_after_a_periodic_checkpoint(agent_factory, tmp_path, acked) -> None:
    with trainer_on_gpus(tmp_path) as (_proc, _nvml, env):
        sim = MetadataSimProcess(tmp_path / "sim.log", "alibaba")
        try:
            agent, saved_at = started_after_a_save(agent_factory, sim, env)
            trainer_seen(agent)
            # 15 s: the ack below is a CLI process, which a loaded box takes seconds to start
            sim.control("/notice", {"kind": "spot-termination", "seconds": 15})
            agent.wait_for(
                lambda: agent.status()["checkpoint"]["active"], what="the checkpoint request", timeout=20
            )
            if acked:
                out = run_cli("ack", "--control-socket", agent.control_socket, "--step", "4100")
                assert out.returncode == 0, out.stderr
            g = agent.wait_for(
                lambda: (s := goodput(agent))["reclaims"] and s, what="the reclaim", timeout=45
            )
            (r,) = g["reclaims"]
            elapsed = time.time() - saved_at
            print(f"\n{r}\n" + "\n".join(g["lines"]))
            if acked:
                assert r["outcome"] == "completed" and r["lost_seconds"] == 0
                assert g["totals"]["lost-to-preemption"] == 0
            else:
                assert r["outcome"] == "missed" and not r["drill"]
                # 10 minutes before the agent started, and the seconds it watched since
                assert 600 - 10 <= r["lost_seconds"] <= elapsed + 10, (r, elapsed)
                assert g["totals"]["lost-to-preemption"] == pytest.approx(2 * r["lost_seconds"], rel=1e-6)
                assert any("lost 10 min of work on 2 GPU(s)" in line for line in g["lines"]), g["lines"]
            assert g["interruptions"] == 1
            assert g["market"] == "spot"  # the metadata service announced a spot notice
        finally:
            sim.stop()


def test_a_reclaim_with_no_trainer_found_books_the_lost_work(agent_factory, tmp_path) -> None:
    """The GPUs work but NVML lists no process the agent can signal: the notice's checkpoint is
    `no-target` (request file only), its deadline passes unacked, and the reclaim is booked all the
    same. A loaded run once had the notice come before the agent's first tick: no reclaim at all."""
    with trainer_on_gpus(tmp_path) as (_proc, nvml, env):
        for i in range(2):
            nvml.set(i, processes=[])
        sim = MetadataSimProcess(tmp_path / "sim.log", "alibaba")
        try:
            agent, saved_at = started_after_a_save(agent_factory, sim, env)
            agent.wait_for(lambda: agent.status()["snapshot"].get("gpus"), what="a tick with the GPUs")
            sim.control("/notice", {"kind": "spot-termination", "seconds": 3})
            g = agent.wait_for(
                lambda: (s := goodput(agent))["reclaims"] and s, what="the reclaim", timeout=30
            )
            (r,) = g["reclaims"]
            assert r["outcome"] == "missed" and not r["drill"], r
            assert 600 - 10 <= r["lost_seconds"] <= time.time() - saved_at + 10, r
            assert g["totals"]["lost-to-preemption"] == pytest.approx(2 * r["lost_seconds"], rel=1e-6)
            events = agent.status()["recent_events"]
            assert any(e["type"] == "checkpoint" and e["phase"] == "no-target" for e in events), events
        finally:
            sim.stop()


def test_drill_reports_what_a_reclaim_would_lose_and_the_cadence(agent_factory, tmp_path) -> None:
    with trainer_on_gpus(tmp_path) as (_proc, _nvml, env):
        agent = agent_factory(
            {"goodput": {**GOODPUT, "resolution": "10s", "mtbi": "24h"}, "trainer": {"discover": ["nvml"]}},
            env=env,
            start=False,
        )
        seed(agent.state_dir, 2, 10)
        agent.start()
        trainer_seen(agent)
        out = run_cli("drill", "--control-socket", agent.control_socket, "--deadline", "3s", timeout=40)
        assert out.returncode == 3, out.stdout + out.stderr  # no ack: would lose work
        print(out.stdout)
        assert re.search(r"a reclaim now would lose 1\d min of work", out.stdout), out.stdout
        assert "cadence: checkpoint every 38 min" in out.stdout  # sqrt(2 x 30 s x 24 h) = 37.9 min
        g = goodput(agent)
        print(g["reclaims"][-1])
        assert g["totals"]["lost-to-preemption"] == 0  # a drill loses nothing
        assert g["reclaims"][-1]["drill"] and g["reclaims"][-1]["lost_seconds"] >= 590
        assert g["cadence"]["interval_seconds"] == pytest.approx((2 * 30 * 86400) ** 0.5, rel=1e-3)


TRAINER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from tna_client import PreemptionGuard
guard = PreemptionGuard(request_file=sys.argv[2])
step = 0
next_save = time.monotonic() + 2
while True:
    time.sleep(0.1)
    step += 1
    if guard.checkpoint_requested:
        time.sleep(0.5)  # the final checkpoint
        guard.ack(step=step, path=f"/ckpt/final-{step}")
        continue
    if time.monotonic() >= next_save:
        t0 = time.monotonic()
        time.sleep(0.3)  # the periodic save
        guard.saved(step=step, path=f"/ckpt/{step}", seconds=time.monotonic() - t0)
        next_save = time.monotonic() + 3
"""


def test_report_from_a_real_run(agent_factory, tmp_path) -> None:
    """A trainer using PreemptionGuard (periodic saves, a drill it acknowledges) on 2 fake GPUs, one of
    which starves for a while; then ``report --since 24h``. The output goes to
    bench/out/goodput_report.txt."""
    from conftest import REPO

    need_binary("cc", "build-essential")
    request = tmp_path / "agent" / "run" / "checkpoint" / "request.json"
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(REPO), str(request)])
    try:
        nvml = FakeNvml(
            tmp_path / "nvml.json",
            gpus=[
                device(i, utilization_gpu=97, sm_active=85.0, processes=[{"pid": trainer.pid}])
                for i in range(2)
            ],
        )
        env = {"LD_LIBRARY_PATH": str(library_dir()), "FAKE_NVML_STATE": str(nvml.path)}
        cfg = {
            "goodput": {**GOODPUT, "mtbi": "24h"},
            "cost": {"currency": "CNY", "instance_hour_price": 36.0, "market": "on-demand"},
            "trainer": {"discover": ["nvml"]},
        }
        agent = agent_factory(cfg, env=env)
        agent.wait_for(lambda: goodput(agent)["gpu_seconds"] > 12, what="6 s of work", timeout=30)
        nvml.set(1, utilization_gpu=10, sm_active=1.0)  # GPU 1 starves
        agent.wait_for(lambda: goodput(agent)["buckets"]["idle"] > 6, what="GPU 1 waiting", timeout=30)
        nvml.set(1, utilization_gpu=97, sm_active=85.0)
        drill = run_cli("drill", "--control-socket", agent.control_socket, "--deadline", "20s", timeout=60)
        assert drill.returncode == 0, drill.stdout + drill.stderr
        agent.wait_for(lambda: goodput(agent)["last_step"], what="periodic saves")
        out = run_cli("report", "--control-socket", agent.control_socket, "--since", "24h")
        assert out.returncode == 0, out.stderr
        text = out.stdout
        (REPO / "bench" / "out").mkdir(parents=True, exist_ok=True)
        (REPO / "bench" / "out" / "goodput_report.txt").write_text(
            drill.stdout + "\n$ training-node-agent report --since 24h\n" + text
        )
        print(drill.stdout + "\n" + text)
        for b in BUCKETS:
            assert re.search(rf"^{re.escape(b)}\s+\d+\.\d{{3}}\s+\d+\.\d%", text, re.M), b
        assert re.search(r"^goodput: \d+\.\d%$", text, re.M)
        assert "spent " in text and " CNY, wasted " in text
        assert "top remedy (idle): Training processes are present but nothing is happening" in text
        assert "cadence: checkpoint every" in text and "cadence: the job checkpoints every" in text
        assert re.search(r"drill drill-\S+: final checkpoint acknowledged, nothing lost", text)
        g = goodput(agent)
        assert g["buckets"]["checkpoint"] > 0 and g["buckets"]["productive"] > g["buckets"]["idle"]
    finally:
        trainer.kill()
        trainer.wait()


@pytest.mark.parametrize("provider, market", [("aws", "spot"), ("alibaba", "on-demand")])
def test_market_auto_follows_the_metadata(agent_factory, tmp_path, provider, market) -> None:
    """AWS says instance-life-cycle = spot before any notice; Alibaba has no such key: on-demand until
    a spot notice comes. The price follows the market."""
    with trainer_on_gpus(tmp_path, gpus=1) as (_proc, _nvml, env):
        sim = MetadataSimProcess(tmp_path / "sim.log", provider)
        try:
            itype = "p4d.24xlarge" if provider == "aws" else "ecs.gn7i-c8g1.2xlarge"
            agent = agent_factory(
                {
                    "goodput": GOODPUT,
                    "cost": {"currency": "USD", "prices": {itype: {"spot": 10.0, "on_demand": 32.0}}},
                    "preemption": {"provider": provider, "endpoint": sim.url, "poll_interval": "200ms"},
                },
                env=env,
            )
            g = agent.wait_for(
                lambda: (s := goodput(agent))["instance_type"] == itype and s["cost"] and s, what="priced"
            )
            assert g["market"] == market
            assert g["cost"]["instance_hour_price"] == (10.0 if market == "spot" else 32.0)
            assert f'training_node_market{{market="{market}"}} 1.0' in agent.metrics()
            if market == "spot":
                agent.wait_for(lambda: goodput(agent)["cost"]["spot_saving"] > 0, what="a spot saving")
        finally:
            sim.stop()
