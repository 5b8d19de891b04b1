"""examples/pytorch_loop.py under torchrun (2 ranks, CPU, gloo) against the real agent: the workers
are signalled, the torchrun agent is not (it has no SIGUSR1 handler, and SIGUSR1 would kill it and
with it the job), rank 0 saves, every rank stops at the same step, the agent gets the ack."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
from checkpoint_helpers import REPO, cli
from conftest import wait_until


def _need_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        reason = "PyTorch is not installed (pip install -e '.[examples]'; `make test` does it)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide this: {reason}")
        pytest.skip(reason)


def test_pytorch_loop_under_torchrun(agent_factory, tmp_path):
    _need_torch()
    shared = tmp_path / "cpfs" / "run42"
    request = tmp_path / "cp" / "request.json"
    log = tmp_path / "torchrun.log"
    env = {**os.environ, "TNA_CHECKPOINT_REQUEST_FILE": str(request), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += ["examples/pytorch_loop.py", "--checkpoint-dir", str(shared), "--step-seconds", "0.02"]
    with open(log, "wb") as out:
        job = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # deliberately broad: it matches torchrun's own agent as well as its two workers
        agent = agent_factory(
            {"trainer": {"discover": [f"cmdline:{re.escape(str(shared))}"], "request_file": str(request)}}
        )
        wait_until(
            lambda: log.read_text().count("training, pid") == 2, timeout=90, what="both ranks training"
        )
        wait_until(lambda: len(agent.status()["checkpoint"]["targets"]) == 3, what="3 targets")
        res = cli(agent, "drill", "--deadline", "120s", "--json", timeout=120)
        report = json.loads(res.stdout)
        outcomes = {t["pid"]: t["outcome"] for t in report["targets"]}
        assert outcomes.pop(job.pid) == "no-handler", report["targets"]  # the torchrun agent: spared
        assert sorted(outcomes.values()) == ["signalled", "signalled"]
        assert report["verdict"] == "safe", report
        assert job.wait(60) == 0, log.read_text()
        text = log.read_text()
        steps = {int(s) for s in re.findall(r"rank \d: checkpoint requested at step (\d+)", text)}
        assert len(steps) == 1, text  # both ranks stopped at the same step
        [saved] = list(shared.glob("step-*.pt"))
        load = f"import torch; print(torch.load({str(saved)!r}, weights_only=True)['step'])"
        saved_step = int(subprocess.run([sys.executable, "-c", load], capture_output=True, text=True).stdout)
        assert saved_step == report["ack"]["step"] == steps.pop()
        assert report["ack"]["path"] == str(saved)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
