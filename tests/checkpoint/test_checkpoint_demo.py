"""`training-node-agent demo --fast` runs to completion on its own and tells the whole story: an
input-bound phase the agent names by itself, then the spot reclaim."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from checkpoint_helpers import REPO
from conftest import need_binary

from agent.preemption import registry


def test_demo_runs_to_completion(tmp_path):
    need_binary("cc", "build-essential")  # the fake libnvidia-ml.so.1 is built on the way
    page = tmp_path / "report.html"
    res = subprocess.run(
        [sys.executable, "-m", "agent", "demo", "--fast", "--html", str(page)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,  # the demo bounds each of its waits itself, and its whole run at 180 s
    )
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "\x1b[" not in out  # not a terminal: plain text
    tmp = re.search(r"everything runs on 127\.0\.0\.1 in (\S+)", out).group(1)
    # two voices, each in order: the agent's and the trainer's (they interleave as they please)
    agent_story = [
        r"metadata simulator playing Alibaba Cloud ECS at http://127\.0\.0\.1:\d+",
        r"4 fake H100 GPUs",
        r"node +│ 4× H100 80GB HBM3  util +\d+%",  # live telemetry from the fake NVML
        r"training process found: pid (\d+) \(python3?\) via nvml, SIGUSR1 handler installed",
        r"agent +│ verdict: DATA/CPU for \d+s\n",  # the input-bound phase, named by the agent itself
        r"agent +│ verdict: COMPUTE for \d+s\n",  # and fed again
        r"cloud +│ Alibaba Cloud will reclaim this spot instance",
        r"notice detected \d+\.\d s after it appeared: spot-termination",
        r"SIGUSR1 → pid \d+",
        r"ack received: checkpoint durable in \d+\.\d s",
        r"verdict: SAFE on Alibaba Cloud spot",
    ]
    trainer_story = [
        r"trainer +│ num_workers=0 now: decoding every batch in this process, \d\.\d s of CPU each",
        r"trainer +│ fed again: batches are ready when the step asks",
        r"cloud +│ Alibaba Cloud will reclaim this spot instance",
        # the agent writes the request file, then signals: a trainer that checks in between learns of
        # it from the file first (seen on a loaded CI box), and the report must say the same
        r"trainer +│ (SIGUSR1 received|request file seen): "
        r"checkpoint requested \(spot-termination, (29\d|300) s left\)",
        r"trainer +│ saved step \d+ to \S+ in \d\.\d s; ack sent",
        r"trainer +│ exited with status 0",
    ]
    for story in (agent_story, trainer_story):
        pos = 0
        for pattern in story:
            m = re.compile(pattern).search(out, pos)
            assert m, f"missing, or out of order: {pattern!r}\n{out}"
            pos = m.end()
    # the report judges the checkpoint against every declared cloud's notice, Tencent's too
    missing = [s.notice.label for s in registry.clouds() if s.notice.label not in out]
    assert len(registry.clouds()) == 5 and missing == [], out
    pid = re.search(r"training process found: pid (\d+)", out).group(1)
    assert f"SIGUSR1 → pid {pid} " in out  # the process it found is the one it signalled

    # the input-bound phase: the agent was told nothing; what it saw was GPUs starving (its own
    # telemetry) and the trainer's CPU, and it says so: the verdict, its reasons, the hint, at once
    turn = out.index("demo    │ now the job turns input-bound")
    data = out.index("agent   │ verdict: DATA/CPU")
    assert turn < data < out.index("cloud   │ Alibaba Cloud will reclaim"), out
    assert re.search(r"node +│ 4× H100 80GB HBM3  util +[0-3]% ", out[turn:data]), out  # starved, as seen
    block = re.compile(r"(?:^ *\d+\.\ds  agent   │ .*\n)+", re.M).match(out, out.rindex("\n", 0, data) + 1)
    said = block.group(0)
    reasons = re.findall(r"│   - (.*)", said)
    decoding = [r for r in reasons if "decodes every batch itself (DataLoader num_workers=0)" in r]
    assert decoding and f"pid {pid} (" in decoding[0], said  # names the trainer it found, and its CPU
    assert re.search(r"busy \d+% of a core \(running or waiting to run\)", decoding[0]), said
    assert re.search(r"│ hint: Input is CPU-bound", said), said
    assert re.search(r"│ scores: compute 0\.\d\d  data (0\.[5-9]\d|1\.00) .*votes data/cpu", said), said

    # the instance advice of each phase (agent.advice, over the last window): input-bound, fix the
    # input first and a cheaper card that would do as well; computing, a slower card only with how
    # much longer each step would take
    fed = out.index("demo    │ then the input is fixed")
    assert re.search(
        r"agent +│ advice: fix the input first: on any card the data wait stays \d+% of each step", said
    )
    cheaper = (
        r"advice: `(\S+)` 4x (\S+) would do about as well: at most ~\d\.\d\d× the step time, at ~0\.\d+×"
    )
    m = re.search(cheaper, said)
    assert m and m.group(2) != "H100-SXM" and out.index(m.group(0)) < fed, said
    computing = out[
        out.index("agent   │ verdict: COMPUTE", fed) : out.index("cloud   │ Alibaba Cloud will reclaim")
    ]
    assert re.search(r"agent +│ advice: its GPUs compute \d+% of the time at 67 GB of 80 GB", computing), (
        computing
    )
    named = re.findall(r"advice: (`\S+` .*)", computing)
    assert named and all(re.search(r"~\d+\.\d–\d+\.\d× (longer|faster) per step", n) for n in named), (
        computing
    )

    # the trainer is a user's script on tna_client, finding the demo's agent the documented way
    assert re.search(
        rf"trainer +│ requests are read from {re.escape(tmp)}/\S+ \(via \$TNA_CHECKPOINT_REQUEST_FILE\)", out
    )
    source = (REPO / "agent" / "devtools" / "demo_trainer.py").read_text()
    assert "from tna_client import" in source and "agent.trainer" not in source
    assert "/run/training-node-agent" not in out  # the demo's agent keeps out of a real agent's place

    # the report says what happened: who saw the request, how and when, and nothing against the ack
    report = out[out.index("── checkpoint report") : out.index("checkpoint on the (pretend) shared storage")]
    ack = re.search(r"^ack: via file step (\d+) at (\S+)$", report, re.M)
    assert ack, report
    by_signal = re.search(r"trainer +│ SIGUSR1 received: checkpoint requested", out)
    how = "by SIGUSR1" if by_signal else "in the request file"
    saw = rf"^  • trainers: pid {pid} \(rank 0\) saw the request {how} at \d\d:\d\d:\d\dZ, \d+\.\d s after"
    assert re.search(saw + r" it was sent, and acked via file \d+\.\d s after the request$", report, re.M), (
        report
    )
    contradictions = ("no trainer", "not found", "none received", "would lose", "after the deadline", "✗")
    assert not [ln for ln in report.splitlines() if any(c in ln.lower() for c in contradictions)], report
    assert re.search(
        rf"saved step {ack.group(1)} to {re.escape(ack.group(2))} in ", out
    )  # the ack is that save
    assert not __import__("os").path.exists(tmp), "the demo left its temporary directory behind"

    # the run as a picture: the agent's report page, rendered in Chromium (tests/report/demo_page.py)
    assert f"the run as a picture: {page}" in out
    sys.path.insert(0, str(REPO / "tests" / "report"))
    from demo_page import check_demo_page

    check_demo_page(page, json.loads(page.with_suffix(".phases.json").read_text()), tmp_path)
