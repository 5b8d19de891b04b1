"""The real daemon as a subprocess: systemd notify, /metrics, /healthz, signals, reload, control socket."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, AgentProcess, free_port, need_binary, run_cli, wait_until
from notify_listener import NotifyListener
from prometheus_client.parser import text_string_to_metric_families

from agent.config import Config, load_config


@pytest.fixture
def notify(tmp_path: Path):
    n = NotifyListener(tmp_path / "notify.sock")
    yield n
    n.close()


def test_ready_watchdog_metrics_and_clean_sigterm(agent_factory, notify):
    agent = agent_factory(
        {"agent": {"interval": "200ms"}},
        env={"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "1000000"},
    )
    wait_until(lambda: notify.lines("READY=1"), 10, what="READY=1")
    pings = wait_until(
        lambda: len(notify.lines("WATCHDOG=1")) >= 3 and notify.lines("WATCHDOG=1"), 10, what="pings"
    )
    # pinged at half the watchdog period: 3 pings well inside 3 periods
    assert pings[2][0] - pings[0][0] < 2.0
    assert any("GPUs" in m for _, m in notify.lines("STATUS="))

    body = agent.metrics()
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    success = {s.labels["collector"]: s.value for s in fams["training_node_collector_success"].samples}
    assert success["host"] == 1.0
    assert "training_node_host_cpu_seconds" in fams
    build = fams["training_node_build_info"].samples[0].labels
    assert build["version"] and build["python"] == ".".join(map(str, sys.version_info[:3]))
    assert not any("hostname" in s.labels for f in fams.values() for s in f.samples)

    status = agent.status()
    assert status["healthy"] is True
    assert status["snapshot"]["collectors"]["host"]["success"] is True
    assert status["snapshot"]["host"]["cpus"] >= 1
    code, html = agent.get("/")
    assert code == 200 and "/metrics" in html and "/healthz" in html

    t0 = time.monotonic()
    rc = agent.stop(timeout=6)
    assert rc == 0
    assert time.monotonic() - t0 < 5.0
    assert notify.lines("STOPPING=1")


def test_metrics_pass_promtool_and_negotiate_openmetrics(agent_factory, kernel_fixtures):
    promtool = need_binary("promtool", "prometheus")
    agent = agent_factory(
        {
            "agent": {
                "procfs": str(kernel_fixtures / "node_exporter" / "proc"),
                "sysfs": str(kernel_fixtures / "node_exporter" / "sys"),
            }
        }
    )
    agent.wait_for(lambda: "training_node_pressure" in agent.metrics(), what="first snapshot")
    body = agent.metrics()
    res = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True)
    assert res.stdout == "" and res.stderr == "", res.stdout + res.stderr
    code, om = agent.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert code == 200 and om.rstrip().endswith("# EOF")
    assert "# EOF" not in body


def _fifo_procfs(tmp: Path) -> Path:
    root = tmp / "stuckproc"
    root.mkdir()
    os.mkfifo(root / "stat")  # opening it blocks forever, like a read from a hung NFS mount
    return root


def test_stuck_collector_stalls_health_and_watchdog(agent_factory, notify, tmp_path):
    agent = agent_factory(
        {
            "agent": {
                "interval": "200ms",
                "collector_timeout": "1s",
                "stall_after": "2s",
                "procfs": str(_fifo_procfs(tmp_path)),
            }
        },
        env={"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "600000"},
    )
    wait_until(lambda: notify.lines("READY=1"), 10, what="READY=1")
    _code, body = agent.wait_for(
        lambda: (r := agent.get("/healthz"))[0] == 503 and r, timeout=10, what="healthz 503"
    )
    reason = json.loads(body)["reason"]
    assert "host" in reason and "stuck" in reason
    # the endpoints keep answering while the collector is stuck
    assert agent.status()["snapshot"]["collectors"]["host"]["success"] is False
    stalled_at = time.monotonic()
    time.sleep(1.5)  # watchdog period 0.6 s: a healthy agent would ping twice in this time
    assert not [t for t, _ in notify.lines("WATCHDOG=1") if t > stalled_at + 0.1]
    assert any("stalled" in m for _, m in notify.lines("STATUS="))
    assert agent.stop(timeout=6) == 0  # exits although a worker thread is blocked in open()


def test_slow_collector_does_not_delay_others(tmp_path):
    """In-process: one collector sleeping 3 s does not hold the snapshot back."""
    import asyncio

    from agent.runtime.sampler import Sampler
    from agent.sources.host.collector import HostCollector

    class Slow:
        name = "slow"
        part = "gpu"

        def collect(self):
            time.sleep(3)

        def close(self):
            pass

    async def go():
        s = Sampler([Slow(), HostCollector("/proc")], interval=0.2, timeout=1.0, stall_after=10)
        t0 = time.monotonic()
        snaps = [await s.tick() for _ in range(3)]
        took = time.monotonic() - t0
        s.close()
        return snaps, took

    snaps, took = asyncio.run(go())
    assert took < 1.5  # three ticks, none waited for the sleeping collector's 3 s
    assert all(sn.parts.get("host") is not None for sn in snaps)
    assert snaps[-1].collectors["host"].success


def test_sighup_with_broken_config_keeps_serving(agent_factory):
    agent = agent_factory({"agent": {"interval": "200ms"}})
    agent.wait_for(lambda: agent.status()["snapshot"]["seq"] > 2, what="sampling")
    original = agent.config_path.read_text()
    agent.config_path.write_text(original + "\n[bogus]\nkey = 1\n")
    agent.signal(signal.SIGHUP)
    agent.wait_for(lambda: "reload rejected" in agent.log(), what="reload rejected log")
    entry = next(
        e for e in agent.log_lines() if e.get("event") == "reload rejected; keeping the running config"
    )
    assert any("bogus" in p for p in entry["problems"])
    seq = agent.status()["snapshot"]["seq"]
    agent.wait_for(lambda: agent.status()["snapshot"]["seq"] > seq + 2, what="still sampling")
    assert agent.status()["reloads"] == 0
    # a valid change is applied
    agent.config_path.write_text(original.replace('interval = "200ms"', 'interval = "300ms"'))
    agent.signal(signal.SIGHUP)
    agent.wait_for(lambda: agent.status()["reloads"] == 1, what="reload applied")
    assert agent.get("/healthz")[0] == 200


def test_control_socket_status_and_reload(agent_factory):
    agent = agent_factory({})
    st = os.stat(agent.control_socket)
    assert oct(st.st_mode & 0o777) == "0o660"
    out = run_cli("status", "--control-socket", agent.control_socket)
    assert out.returncode == 0, out.stderr
    assert "healthy" in out.stdout and "[collectors]" in out.stdout
    out = run_cli("status", "--json", "--control-socket", agent.control_socket)
    assert json.loads(out.stdout)["version"]
    out = run_cli("reload", "--control-socket", agent.control_socket)
    assert out.returncode == 0 and "reloaded" in out.stdout
    # nothing that changes state is reachable on the TCP port
    assert agent.get("/reload")[0] == 404
    import urllib.request

    req = urllib.request.Request(agent.url + "/reload", method="POST", data=b"{}")
    try:
        code = urllib.request.urlopen(req, timeout=5).status
    except urllib.error.HTTPError as e:
        code = e.code
    assert code in (404, 405)


def _watching() -> dict[str, str]:
    """A watcher with a cloud to watch (nothing listens there) runs as long as the agent does."""
    return {"provider": "aws", "endpoint": f"http://127.0.0.1:{free_port()}"}


def test_reloads_keep_the_watchdog_the_journal_and_status_alive(agent_factory, notify):
    """systemd kills a unit whose pings stop for WatchdogSec: a reload must not stop them."""
    agent = agent_factory(
        {"agent": {"interval": "200ms"}, "preemption": _watching()},
        # WatchdogSec=3 s: pings every 1.5 s, so a loaded test machine has 1.5 s of slack
        env={"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "3000000"},
    )
    wait_until(lambda: notify.lines("READY=1"), 10, what="READY=1")
    started = time.monotonic()
    for n in (1, 2, 3):  # both ways in: SIGHUP (systemctl reload) and the control socket
        if n == 2:
            out = run_cli("reload", "--control-socket", agent.control_socket)
            assert out.returncode == 0 and "reloaded" in out.stdout, out.stdout + out.stderr
        else:
            agent.signal(signal.SIGHUP)
        agent.wait_for(lambda n=n: agent.status()["reloads"] == n, what=f"reload {n}")
    last = time.monotonic()
    # four pings after the last reload, 1.5 s apart: well past the 3 s at which systemd would kill it
    wait_until(
        lambda: len([t for t, _ in notify.lines("WATCHDOG=1") if t > last]) >= 4,
        20,
        what="pings after reloads",
    )
    pings = [t for t, _ in notify.lines("WATCHDOG=1") if t > started]
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert max(gaps) < 3.0, f"a gap of {max(gaps):.2f} s: systemd's watchdog would have fired"
    assert [m for t, m in notify.lines("STATUS=") if t > last and "GPUs" in m], "STATUS= stopped updating"
    assert len(notify.lines("READY=1")) == 4 and len(notify.lines("RELOADING=1")) == 3
    tasks = agent.status()["tasks"]
    assert {"events", "watchdog", "sampler", "checkpoint", "preemption"} <= tasks.keys()
    assert all(t["running"] for t in tasks.values()), [t for t in tasks.values() if not t["running"]]
    # the journal still records what the rebuilt parts publish
    out = run_cli("drill", "--dry-run", "--deadline", "5s", "--control-socket", agent.control_socket)
    assert out.returncode == 0, out.stdout + out.stderr
    agent.wait_for(
        lambda: any(e.get("drill") for e in agent.status()["recent_events"]), what="the drill in the journal"
    )


def _ready_ticks(notify) -> list[int]:
    """The tick each READY=1 named in its STATUS= (sent in the same datagram, the line after it)."""
    lines = [m for _, m in list(notify.messages)]
    return [
        int(m.group(1))
        for ready, status in itertools.pairwise(lines)
        if ready == "READY=1" and (m := re.search(r"tick (\d+)", status))
    ]


def test_a_reload_serves_the_last_snapshot_until_the_new_sampler_ticks(agent_factory, notify):
    """A reload builds a new sampler; until its first tick the agent serves the last snapshot, and the
    tick count goes on. A loaded run caught status at seq 0 just after a reload: every scrape then saw
    an empty node. The READY=1 of a reload is sent before the new sampler can tick, so it shows it."""
    agent = agent_factory({"agent": {"interval": "200ms"}}, env={"NOTIFY_SOCKET": notify.path})
    wait_until(lambda: notify.lines("READY=1"), 10, what="READY=1")
    seen = agent.wait_for(
        lambda: agent.status()["snapshot"]["seq"] >= 3 and agent.status()["snapshot"]["seq"], 15
    )
    before = len(_ready_ticks(notify))  # the first READY=1 names the listener, not a tick
    agent.signal(signal.SIGHUP)
    ticks = wait_until(
        lambda: len(_ready_ticks(notify)) > before and _ready_ticks(notify),
        15,
        what="the reload's READY=1 with its tick",
        detail=lambda: str(notify.messages[-12:]),
    )
    assert ticks[before] >= seen, notify.messages
    assert agent.status()["snapshot"]["seq"] >= seen


def test_a_sighup_storm_is_coalesced_and_the_agent_keeps_running(agent_factory, notify):
    agent = agent_factory(
        {"agent": {"interval": "200ms"}, "preemption": _watching()},
        env={"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "2000000"},
    )
    wait_until(lambda: notify.lines("READY=1"), 10, what="READY=1")
    original = agent.config_path.read_text()
    # one burst, as fast as signals go: a reload on a quiet machine takes a few ms, so signals spaced
    # 10 ms apart were each reloaded in turn and nothing was left to coalesce
    for i in range(40):
        agent.signal(signal.SIGHUP)
        if i == 20:  # a valid change in the middle of the storm
            agent.config_path.write_text(original.replace('interval = "200ms"', 'interval = "300ms"'))
    agent.wait_for(
        lambda: (
            not [t for t, m in notify.lines("RELOADING=1") if t > time.monotonic() - 2.0]
            and agent.status()["reloads"] >= 1
        ),
        30,
        what="the storm to settle",
    )
    reloads = agent.status()["reloads"]
    assert 1 <= reloads < 40, f"{reloads} reloads for 40 signals: not coalesced"
    assert len(notify.lines("READY=1")) == 1 + reloads, "a reload that did not say READY=1 again"
    st = agent.status()
    assert all(t["running"] for t in st["tasks"].values()), st["tasks"]
    assert st["snapshot"]["seq"] > 0 and agent.get("/healthz")[0] == 200
    last = time.monotonic()
    wait_until(lambda: [t for t, _ in notify.lines("WATCHDOG=1") if t > last + 1.5], 10, what="pings after")


def test_reload_that_cannot_build_keeps_the_running_config(agent_factory, tmp_path):
    agent = agent_factory({"agent": {"interval": "200ms"}, "preemption": _watching()})
    agent.wait_for(lambda: agent.status()["snapshot"]["seq"] > 2, what="sampling")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    original = agent.config_path.read_text()
    # valid config, but its state_dir cannot be created: a file stands in the way
    changed = re.sub(r'(?m)^state_dir = ".*"$', f'state_dir = "{blocker}/state"', original)
    assert changed != original
    agent.config_path.write_text(changed)
    out = run_cli("reload", "--control-socket", agent.control_socket)
    assert out.returncode == 2 and "the running config is kept" in out.stdout, out.stdout + out.stderr
    st = agent.status()
    assert st["reloads"] == 0 and all(t["running"] for t in st["tasks"].values()), st["tasks"]
    seq = st["snapshot"]["seq"]
    agent.wait_for(lambda: agent.status()["snapshot"]["seq"] > seq + 2, what="still sampling")


def test_status_without_agent_is_a_clear_error(tmp_path):
    out = run_cli("status", "--control-socket", str(tmp_path / "none.sock"))
    assert out.returncode == 1
    assert "is the agent running" in out.stderr and "Traceback" not in out.stderr


def test_port_in_use_is_one_line_error(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        a = AgentProcess(tmp_path, {"http": {"listen": f"127.0.0.1:{port}"}})
        out = run_cli("run", "--config", str(a.config_path))
    assert out.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_check_config_lists_every_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[agent]\ninterval = 5\nprocfz = "/x"\nlog_level = "loud"\n'
        '[http]\nlisten = "nowhere"\n[gpu]\nenabled = "maybe"\n[nonsense]\n'
    )
    out = run_cli("check-config", "--config", str(bad))
    assert out.returncode == 2
    err = out.stderr
    assert str(bad) in err
    for key in (
        "agent.interval",
        "agent.procfz",
        "agent.log_level",
        "http.listen",
        "gpu.enabled",
        "nonsense",
    ):
        assert key in err, (key, err)
    assert "6 problems" in err


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (None, "file not found"),
        ("[agent\ninterval=", "invalid TOML"),
        (b"\xff\xfe[agent]", "not UTF-8"),
    ],
)
def test_check_config_unreadable_files(tmp_path, content, expect):
    path = tmp_path / "c.toml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    out = run_cli("check-config", "--config", str(path))
    assert out.returncode == 2 and expect in out.stderr and str(path) in out.stderr


def test_shipped_config_is_valid_and_documents_defaults():
    path = REPO / "configs" / "agent.toml"
    out = run_cli("check-config", "--config", str(path))
    assert out.returncode == 0, out.stderr
    resolved = json.loads(out.stdout.split("\n", 1)[1])
    text = path.read_text()
    # the shipped file states the defaults, nothing else
    assert load_config(path) == Config()
    # every key of every section appears in the shipped file, at least as a comment
    for section, values in resolved.items():
        assert f"[{section}]" in text, section
        for key in values:
            documented = f"{key} =" in text or f"[{section}.{key}]" in text or f"[[{section}.{key}]]" in text
            assert documented, f"{section}.{key} is not documented in configs/agent.toml"


def test_free_port_helper_gives_bindable_port():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
