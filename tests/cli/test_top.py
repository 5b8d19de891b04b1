"""``training-node-agent top`` against the real daemon: in tmux at three sizes through a scenario that
changes (compute, then spinning GPUs, then a spot notice from the metadata simulator), the ways it
refuses to start, one frame to a pipe, and the daemon never loading the view."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, AgentProcess, need_binary, run_cli, wait_until
from tmux_pane import TmuxPane

from agent.devtools.fake_nvml import FakeNvml, device, library_dir
from agent.devtools.simprocess import MetadataSimProcess

GIB = 1024**3
SIZES = ((80, 24), (120, 40), (200, 50))
GPUS = 4
# a GPU row: index, the utilization bar and percentage, the real-work bar, its source and percentage
ROW = re.compile(r"^\s*(\d+) util ▕([^▏]*)▏\s+(\d+)%\s+(sm|tc|pwr)\s+▕([^▏]*)▏\s+(\d+)%( SPIN)?")
COUNTDOWN = re.compile(r"NOTICE spot-termination\s+(\d\d):(\d\d) left")
ESC = re.compile(r"\x1b\[[0-9;]*m")


def compute(i: int, pid: int | None = None) -> dict:
    return device(
        i,
        utilization_gpu=98,
        sm_active=80.0,
        tensor_active=60.0,
        power_mw=610_000,
        memory_used_bytes=70 * GIB,
        processes=[{"pid": pid, "used_memory_bytes": 69 * GIB}] if pid else [],
    )


class Scenario:
    def __init__(self, tmp: Path) -> None:
        # the toy trainer with a checkpoint handler: it saves (2 s), acknowledges and trains on
        request = tmp / "run" / "checkpoint" / "request.json"
        cmd = [sys.executable, "-m", "agent.devtools.demo_trainer", "--checkpoint-dir", str(tmp / "ckpt")]
        cmd += [
            "--request-file",
            str(request),
            "--keep-going",
            "--save-seconds",
            "2",
            "--print-every",
            "100000",
        ]
        # a rank of a job of two: its GPUs' spin is a collective waiting (one process launched with no
        # rank count has no peer, and its spin is launch overhead: host/launch)
        self.trainer = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            env={**os.environ, "WORLD_SIZE": "2"},
        )
        self.nvml = FakeNvml(
            tmp / "nvml.json", gpus=[compute(i, self.trainer.pid if i == 0 else None) for i in range(GPUS)]
        )
        self.sim = MetadataSimProcess(tmp / "sim.log", "alibaba")
        self.agent = AgentProcess(
            tmp,
            {
                "preemption": {
                    "provider": "alibaba",
                    "endpoint": self.sim.url,
                    "poll_interval": "200ms",
                    "maintenance_interval": "1s",
                },
                "trainer": {"discover": ["nvml"]},
                # a verdict within seconds; two confirmations so a change is seen pending first
                "classifier": {"window": "2s", "evaluate_every": "1s", "confirmations": 2, "warmup": "0s"},
            },
            env={"LD_LIBRARY_PATH": str(library_dir()), "FAKE_NVML_STATE": str(self.nvml.path)},
        )

    def spin(self) -> None:
        for i in range(GPUS):
            self.nvml.set(i, sm_active=3.0, tensor_active=1.0, power_mw=140_000)

    def close(self) -> None:
        self.agent.stop()
        if getattr(self.agent, "_log", None):
            self.agent._log.close()
        self.sim.stop()
        self.trainer.kill()
        self.trainer.wait()


@pytest.fixture
def scenario(tmp_path: Path) -> Iterator[Scenario]:
    need_binary("cc", "build-essential")
    s = Scenario(tmp_path)
    try:
        s.agent.start()
        yield s
    finally:
        s.close()


def top_script(tmp: Path, name: str, agent: AgentProcess) -> Path:
    """What the pane runs: the terminal modes before, top, its exit code, the modes after."""
    cmd = shlex.join([sys.executable, "-m", "agent", "top", "--config", str(agent.config_path)])
    script = tmp / f"{name}.sh"
    script.write_text(
        # a trap (not an ignore: top must get Ctrl-C) keeps the script going when top is interrupted
        "trap 'echo INTERRUPTED' INT\n"
        f"cd {shlex.quote(str(REPO))}\n"
        f"export PYTHONPATH={shlex.quote(os.environ.get('PYTHONPATH', ''))}\n"
        # written whole, then renamed: the test waits for the file, and must not read it half made
        f"stty -g > {tmp / name}.before.part && mv {tmp / name}.before.part {tmp / name}.before\n"
        "echo BEFORE-TOP\n"
        f"{cmd}\n"
        "echo EXIT=$?\n"
        f"stty -g > {tmp / name}.after.part && mv {tmp / name}.after.part {tmp / name}.after\n"
        "sleep 600\n"
    )
    return script


def gpu_rows(screen: str) -> dict[int, re.Match[str]]:
    return {int(m.group(1)): m for line in screen.splitlines() if (m := ROW.match(line))}


def filled(bar: str) -> float:
    """How much of a bar is drawn, in cells (eighth blocks count as eighths)."""
    eighths = " ▏▎▍▌▋▊▉"
    return sum(1.0 if c == "█" else eighths.index(c) / 8 if c in eighths[1:] else 0.0 for c in bar)


def test_top_in_tmux_follows_compute_spinning_and_a_notice(tmp_path: Path, scenario: Scenario) -> None:
    tmux = need_binary("tmux", "tmux")
    panes = [
        TmuxPane(tmux, f"top{w}x{h}", w, h, top_script(tmp_path, f"top{w}x{h}", scenario.agent))
        for w, h in SIZES
    ]
    try:
        # 1. compute: every GPU on screen at every size, both bars full, no SPIN
        for p in panes:
            screen = p.wait_for(lambda s: "COMPUTE-BOUND" in s and len(gpu_rows(s)) == GPUS, 60, "compute")
            assert screen.splitlines()[0].startswith("training-node-agent top"), screen
            for m in gpu_rows(screen).values():
                # utilization is the driver's buffer time-weighted over the tick: 98% to within a
                # sample's timestamp jitter, shown rounded down
                assert int(m.group(3)) in (97, 98) and m.group(6) == "80" and m.group(7) is None, m.group(0)
            assert "GPU health ok" in screen
            # it lays out for the pane's own size: never wider, and the wide panes are used
            longest = max(len(line.rstrip()) for line in screen.splitlines())
            assert longest <= p.width and (p.width <= 80 or longest > 100), f"{longest}\n{screen}"
            assert ("│" in screen) == (p.width >= 160), screen  # side by side from 160 columns
            assert "preemption alibaba" in screen and "no notice" in screen, screen
            if p.height >= 40:  # the goodput ledger's section (the lowest part, on the taller screens)
                p.wait_for(
                    lambda s: re.search(r"(^|│)goodput \d+% ", s, re.M) and "productive" in s, 30, "goodput"
                )
        first = panes[0].capture()

        # 2. spinning: utilization stays, real work drops; the verdict changes to sync-wait
        scenario.spin()
        for p in panes:
            screen = p.wait_for(lambda s: "SYNC-WAIT" in s, 60, "the sync-wait verdict")
            rows = gpu_rows(screen)
            assert len(rows) == GPUS, screen
            for m in rows.values():
                util_bar, work_bar = m.group(2), m.group(5)
                assert m.group(7) == " SPIN", m.group(0)
                assert int(m.group(3)) in (97, 98) and int(m.group(6)) == 3, m.group(0)
                # the two bars tell it apart: one nearly full, the other nearly empty
                assert (
                    filled(util_bar) >= 0.9 * len(util_bar) and filled(work_bar) <= 0.1 * len(work_bar) + 0.2
                )
        assert panes[0].capture() != first  # the screen updates

        # 3. a spot notice from the simulator: a red countdown that runs down
        scenario.sim.control("/notice", {"kind": "spot-termination", "seconds": 300})
        for p in panes:
            screen = p.wait_for(lambda s: COUNTDOWN.search(s), 30, "the countdown")
            cd = COUNTDOWN.search(screen)
            assert cd is not None
            left = int(cd.group(1)) * 60 + int(cd.group(2))
            assert 240 <= left <= 300, screen
            coloured = p.capture(escapes=True)
            line = next(ln for ln in coloured.splitlines() if "NOTICE" in ln)
            # the countdown cell sits in a red background (SGR 41), whatever else styles it
            assert re.search(r"\x1b\[(?:[0-9;]*;)?41(?:;[0-9;]*)?m\s*\d\d:\d\d left", line), repr(line)
        # the trainer's side of the handshake: its handler, the request, its ack, under the notice
        for p in panes:
            screen = p.wait_for(lambda s: "checkpoint completed: completed in" in s, 30, "the ack")
            assert "handler ready" in screen and "request file present" in screen, screen
        later = panes[0].wait_for(
            lambda s: (
                (m := COUNTDOWN.search(s)) is not None and int(m.group(1)) * 60 + int(m.group(2)) < left
            ),
            15,
            "the countdown to run down",
        )
        assert "SYNC-WAIT" in later

        # 4. q: top ends with 0, the main screen is back and the terminal modes are what they were
        for p in panes:
            p.keys("q")
        for p in panes:
            name = f"top{p.width}x{p.height}"
            screen = p.wait_for(lambda s: "EXIT=" in s, 15, "top to exit")
            assert "EXIT=0" in screen, screen
            assert "BEFORE-TOP" in screen and "training-node-agent top" not in screen, screen
            wait_until(lambda n=name: (tmp_path / f"{n}.after").exists(), 10, what="stty after")
            assert (tmp_path / f"{name}.after").read_text() == (tmp_path / f"{name}.before").read_text()
    finally:
        for p in panes:
            p.close()


def test_keys_help_and_gpu_detail(tmp_path: Path, scenario: Scenario) -> None:
    tmux = need_binary("tmux", "tmux")
    p = TmuxPane(tmux, "topkeys", 120, 40, top_script(tmp_path, "topkeys", scenario.agent))
    try:
        p.wait_for(lambda s: len(gpu_rows(s)) == GPUS, 60, "the GPU rows")
        p.keys("g")
        screen = p.wait_for(lambda s: "00000000:18:00.0" in s, 10, "the per-GPU detail")
        assert f"pid {scenario.trainer.pid}" in screen and "tensor 60%" in screen, screen
        p.keys("h")
        screen = p.wait_for(lambda s: "this help" in s, 10, "the help")
        assert not gpu_rows(screen)
        p.keys("x")  # any key leaves the help
        p.wait_for(lambda s: len(gpu_rows(s)) == GPUS and "00000000:18:00.0" in s, 10, "detail again")
        p.keys("g")
        p.wait_for(lambda s: len(gpu_rows(s)) == GPUS and "00000000:18:00.0" not in s, 10, "detail off")
        p.keys("q")
        assert "EXIT=0" in p.wait_for(lambda s: "EXIT=" in s, 15, "top to exit")
    finally:
        p.close()


def test_the_agent_going_away_is_said_and_outlived(tmp_path: Path, scenario: Scenario) -> None:
    tmux = need_binary("tmux", "tmux")
    p = TmuxPane(tmux, "topgone", 100, 30, top_script(tmp_path, "topgone", scenario.agent))
    try:
        p.wait_for(lambda s: len(gpu_rows(s)) == GPUS, 60, "the GPU rows")
        scenario.agent.stop()
        screen = p.wait_for(lambda s: "agent unreachable, retrying" in s, 20, "the unreachable note")
        assert len(gpu_rows(screen)) == GPUS  # the last screen stays
        scenario.agent.start()
        p.wait_for(lambda s: "agent unreachable" not in s and len(gpu_rows(s)) == GPUS, 30, "the new agent")
        p.keys("C-c")  # Ctrl-C ends it too, and the terminal comes back all the same
        screen = p.wait_for(lambda s: "EXIT=" in s, 15, "top to exit")
        assert "EXIT=130" in screen and "training-node-agent top" not in screen, screen
        after = wait_until(lambda: (tmp_path / "topgone.after").exists(), 10, what="stty after")
        assert after and (tmp_path / "topgone.after").read_text() == (tmp_path / "topgone.before").read_text()
    finally:
        p.close()


def test_a_pipe_gets_one_frame(scenario: Scenario) -> None:
    scenario.agent.wait_for(lambda: scenario.agent.status()["snapshot"].get("gpus"), what="GPUs")
    env = {**os.environ, "COLUMNS": "100"}
    started = time.monotonic()
    done = run_cli("top", "--config", str(scenario.agent.config_path), env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 20  # it did not stay to refresh
    out = done.stdout
    assert out.startswith("training-node-agent top") and out.count("training-node-agent top") == 1, out
    assert len(gpu_rows(out)) == GPUS, out
    assert "\x1b" not in out  # no colours, no cursor movement, no alternate screen
    assert max(len(line) for line in out.splitlines()) <= 100


def test_no_agent_says_so(tmp_path: Path) -> None:
    sock = tmp_path / "run" / "control.sock"
    done = run_cli("top", "--control-socket", str(sock))
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(sock) in lines[0] and "is the agent running" in lines[0] and "systemctl start" in lines[0], (
        lines[0]
    )


def test_a_stale_socket_says_nothing_listens(tmp_path: Path) -> None:
    sock = tmp_path / "control.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))  # bound, never listening: what a killed agent leaves behind
    s.close()
    done = run_cli("top", "--control-socket", str(sock))
    assert done.returncode == 1 and done.stdout == ""
    line = done.stderr.strip()
    assert "\n" not in line and "nothing listens" in line and "systemctl start" in line, line


def test_a_refused_socket_says_how_to_get_access(tmp_path: Path) -> None:
    need_binary("setpriv", "util-linux")
    sock = tmp_path / "control.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))
    s.listen()
    try:
        os.chmod(sock, 0)
        cmd = [sys.executable, "-m", "agent", "top", "--control-socket", str(sock)]
        if os.geteuid() == 0:
            # root passes file modes by CAP_DAC_OVERRIDE: drop it (and read-search) as an operator lacks it
            cmd = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-all", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=30)
    finally:
        s.close()
    assert done.returncode == 1 and done.stdout == ""
    line = done.stderr.strip()
    assert "\n" not in line and "permission denied" in line and "group" in line, line


def test_without_the_extra_it_says_what_to_install(tmp_path: Path) -> None:
    blocker = tmp_path / "no-rich"
    (blocker / "rich").mkdir(parents=True)
    (blocker / "rich" / "__init__.py").write_text("raise ModuleNotFoundError('blocked', name='rich')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])}
    done = run_cli("top", "--control-socket", str(tmp_path / "none.sock"), env=env)
    assert done.returncode == 1
    # the exact command for this interpreter's venv, not a bare pip that could be another Python's
    assert f"{sys.executable} -m pip install 'training-node-agent[top]'" in done.stderr, done.stderr


# --- the daemon does not load the view ---------------------------------------------------------------

DUMP = """
import json, re, sys, threading, time
from pathlib import Path
out, trigger = Path(sys.argv[1]), Path(sys.argv[2])
def dump():
    while not trigger.exists():
        time.sleep(0.1)
    rss = int(re.search(r"VmRSS:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1))
    # written aside and renamed: the test reads it once it exists, and a loaded box once read it empty
    part = out.with_name(out.name + ".part")
    part.write_text(json.dumps({"modules": sorted(sys.modules), "rss_kib": rss}))
    part.replace(out)
threading.Thread(target=dump, daemon=True).start()
from agent.cli.main import main
sys.exit(main(sys.argv[3:]))
"""


def _daemon_modules(tmp: Path, blocked: bool) -> dict:
    """The modules (and RSS) of a real daemon that `top` has been reading for a few seconds; with
    ``blocked`` rich cannot be imported at all, as on a node without the [top] extra."""
    name = "blocked" if blocked else "normal"
    nvml = FakeNvml(tmp / f"nvml-{name}.json", gpus=[compute(i) for i in range(2)])
    env = {"LD_LIBRARY_PATH": str(library_dir()), "FAKE_NVML_STATE": str(nvml.path)}
    if blocked:
        blocker = tmp / "no-rich"
        (blocker / "rich").mkdir(parents=True, exist_ok=True)
        (blocker / "rich" / "__init__.py").write_text("raise ModuleNotFoundError('blocked', name='rich')\n")
        env["PYTHONPATH"] = os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])
    (tmp / name).mkdir()
    agent = AgentProcess(tmp / name, {}, env=env)
    out, trigger = tmp / f"{name}.json", tmp / f"{name}.trigger"
    agent.proc = subprocess.Popen(
        [sys.executable, "-c", DUMP, str(out), str(trigger), "run", "--config", str(agent.config_path)],
        cwd=REPO,
        env=agent.env,
        stdout=open(agent.log_path, "ab"),  # noqa: SIM115 - closed with the process
        stderr=subprocess.STDOUT,
    )
    try:
        agent.wait_ready()
        agent.wait_for(lambda: agent.status()["snapshot"].get("gpus"), what="GPUs")
        if not blocked:
            for _ in range(3):  # top's requests are served by the daemon: they must not load anything
                done = run_cli("top", "--config", str(agent.config_path))
                assert done.returncode == 0, done.stderr
        trigger.touch()
        wait_until(out.exists, 10, what="the module dump")
        return json.loads(out.read_text())
    finally:
        agent.stop()


def test_the_daemon_never_imports_the_view(tmp_path: Path) -> None:
    need_binary("cc", "build-essential")
    normal = _daemon_modules(tmp_path, blocked=False)
    blocked = _daemon_modules(tmp_path, blocked=True)
    libraries = {"rich", "pygments", "markdown_it", "textual"}
    screens = {"agent.cli.topview", "agent.cli.topparts", "agent.cli.toppanels"}
    loaded = {m for m in normal["modules"] if m.split(".")[0] in libraries or m in screens}
    assert not loaded, sorted(loaded)
    assert "agent.runtime.daemon" in normal["modules"]  # it is the daemon's list
    # the same import list whether or not the extra is installed
    assert set(normal["modules"]) == set(blocked["modules"]), set(normal["modules"]) ^ set(blocked["modules"])
    print(f"daemon RSS: {normal['rss_kib']} KiB with the [top] extra, {blocked['rss_kib']} KiB without")
    # rich alone would add about 0.6 MiB; run-to-run noise is about that too, so only a gross change fails
    assert abs(normal["rss_kib"] - blocked["rss_kib"]) < 4096
