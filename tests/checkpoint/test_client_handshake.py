"""An agent started the way `make run` starts it (``--state-dir``, so its request file is not at the
default place) and a trainer given no environment variable find each other through the discovery
record at its fixed place, and complete the handshake. Both run in a private mount namespace with
a fresh /run, so the fixed place is the real one and no other agent on this machine is seen."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from checkpoint_helpers import REPO
from conftest import free_port, write_toml
from test_client_frameworks import client_env, need_client_venv

from agent.checkpoint.report import render_report

DRIVER = r"""
import json, os, subprocess, sys, time
agent_py, client_py, repo, t = sys.argv[1:5]
cfg = f"{t}/agent.toml"
state = f"{t}/state"
common = ["--config", cfg, "--state-dir", state]
env = {k: v for k, v in os.environ.items() if k != "TNA_CHECKPOINT_REQUEST_FILE"}
out = {}
agent = subprocess.Popen([agent_py, "-m", "agent", "run", *common], cwd=repo,
                         stdout=open(f"{t}/agent.log", "wb"), stderr=subprocess.STDOUT)
record = "/run/training-node-agent/agent.json"
for _ in range(300):
    if os.path.exists(record) or agent.poll() is not None:
        break
    time.sleep(0.1)
out["record"] = json.load(open(record)) if os.path.exists(record) else None
if agent.poll() is not None:
    sys.exit("the agent exited: " + open(f"{t}/agent.log").read()[-2000:])
loop = [f"{repo}/examples/pytorch_loop.py", "--checkpoint-dir", f"{t}/ckpt", "--step-seconds", "0.02"]
trainer = subprocess.Popen([client_py, *loop], cwd=t, env=json.loads(sys.argv[5]),
                           stdout=open(f"{t}/trainer.log", "wb"), stderr=subprocess.STDOUT)
status = None
for _ in range(300):
    if agent.poll() is not None or trainer.poll() is not None:
        break
    cmd = [agent_py, "-m", "agent", "status", *common, "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode == 0:
        status = json.loads(res.stdout)["checkpoint"]
        if status["trainers"] and any(x["handler"] == "handler" for x in status["targets"]):
            break
    time.sleep(0.2)
out["status"] = status
res = subprocess.run([agent_py, "-m", "agent", "drill", *common, "--deadline", "120s", "--json"],
                     capture_output=True, text=True, timeout=150)
out["drill"] = json.loads(res.stdout) if res.returncode in (0, 3) else res.stderr
out["trainer_rc"] = trainer.wait(60)
agent.terminate()
out["agent_rc"] = agent.wait(30)
out["record_after_stop"] = os.path.exists(record)
print(json.dumps(out))
"""


def _namespace() -> list[str]:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    cmd = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        cmd.append("--map-root-user")  # an unprivileged user namespace is enough for a tmpfs on /run
    probe = subprocess.run([*cmd, "sh", "-c", "mount -t tmpfs tmpfs /run"], capture_output=True, text=True)
    if probe.returncode != 0:
        reason = f"cannot make a private /run: {probe.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return cmd


@pytest.mark.slow
def test_state_dir_agent_and_trainer_without_env_complete_the_handshake(tmp_path):
    py = need_client_venv()
    ns = _namespace()
    ckpt = tmp_path / "ckpt"
    write_toml(
        tmp_path / "agent.toml",
        {
            "agent": {"interval": "500ms", "log_format": "json"},
            "http": {"listen": f"127.0.0.1:{free_port()}"},
            "preemption": {"provider": "none"},
            "trainer": {"discover": [f"cmdline:{re.escape(str(ckpt))}"], "discover_interval": "1s"},
        },
    )
    env = client_env()
    assert not any(k.startswith("TNA_") for k in env)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    args = [sys.executable, str(driver), sys.executable, str(py), str(REPO), str(tmp_path), json.dumps(env)]
    script = "mount -t tmpfs -o mode=0755 tmpfs /run && exec " + shlex.join(args)
    res = subprocess.run([*ns, "sh", "-c", script], capture_output=True, text=True, timeout=300)
    trainer_log = (tmp_path / "trainer.log").read_text() if (tmp_path / "trainer.log").exists() else ""
    assert res.returncode == 0, res.stderr + trainer_log
    out = json.loads(res.stdout.strip().splitlines()[-1])
    request_file = str(tmp_path / "state" / "run" / "checkpoint" / "request.json")
    assert out["record"]["request_file"] == request_file, out["record"]
    status = out["status"]
    assert status["request_file"] == request_file
    assert status["discovery_file"] == "/run/training-node-agent/agent.json"
    assert [t["rank"] for t in status["trainers"]] == [0], status
    assert any(line.startswith(f"request file {request_file}: found by pid") for line in status["lines"])
    drill = out["drill"]
    assert isinstance(drill, dict), drill
    assert drill["verdict"] == "safe", (drill, trainer_log)
    # what happened, not what was known when the request went out: who saw it, how and when
    seen = drill["channels"]["trainers"]
    pid = drill["ack"]["pid"]
    sent = [(t["pid"], t["signal"], t["outcome"]) for t in drill["targets"]]
    assert (pid, "SIGUSR1", "signalled") in sent, sent
    # the file goes first and the signal right after; a trainer whose look at the file (every 0.5 s)
    # falls between them saw it there first (a clean clone beside stress-ng did), and says so
    assert re.match(rf"pid {pid} \(rank 0\) saw the request (by SIGUSR1|in the request file) at ", seen), seen
    assert "s after it was sent, and acked via file" in seen, seen
    assert drill["ack"]["step"] > 0 and os.path.exists(drill["ack"]["path"])
    assert out["trainer_rc"] == 0, trainer_log
    assert f"saved {drill['ack']['path']}, acked True" in trainer_log
    assert "no training-node-agent found" not in trainer_log
    assert out["agent_rc"] == 0 and out["record_after_stop"] is False  # the agent takes its record back
    text = render_report(drill)
    assert f"• file: {request_file}" in text and f"• trainers: {seen}" in text
    print("\n" + text, file=sys.stderr)
