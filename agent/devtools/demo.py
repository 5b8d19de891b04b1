"""``training-node-agent demo`` (``make demo``): an input-bound job caught, then a spot reclaim
rehearsed end to end, in about a minute on any Linux box: no root, no GPU, no cloud.

Everything runs on 127.0.0.1 under a temporary directory:

* the metadata simulator, playing Alibaba Cloud ECS (in this process);
* four fake GPUs: the fake ``libnvidia-ml.so.1`` (``make fakenvml``), whose state this process animates;
* a toy trainer (``agent.devtools.demo_trainer``) on ``tna_client``, the client a training script
  installs, listed as the GPUs' compute process, so the agent finds it the way it finds a real job:
  through NVML. It finds the agent through ``$TNA_CHECKPOINT_REQUEST_FILE``, the documented way to
  an agent that is not at the fixed place: the demo's agent publishes its discovery record in the
  temporary directory, never over a real agent's in /run;
* the agent itself, a real daemon subprocess.

The story: live telemetry and the verdict ``compute``. Then the trainer turns input-bound: it decodes
every batch in its own process (``num_workers=0``, real CPU work) while the GPUs starve, and the agent,
told nothing, finds ``data`` (``cpu``) from what it measures and says why and what to do; the trainer
is fed again and the verdict is ``compute`` again (agent.devtools.demo_input). Then the cloud
announces the reclaim, the agent signals the trainer, the trainer checkpoints to "shared storage" and
acknowledges, and the agent reports whether it made it. The agent's [classifier] window is seconds
long here, not a minute, so that each verdict turns while one watches.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.core.vocabulary import (
    CHECKPOINT_ENDS,
    CheckpointPhase,
    Cloud,
    DrillVerdict,
    HandlerState,
    NoticeKind,
)
from agent.devtools.demo_input import advice_config, classifier_config, input_bound, tell_trainer
from agent.devtools.demo_screen import FAST, NORMAL, DemoFailed, Screen, telemetry_line
from agent.devtools.report_run import fetch_page

GIB = 1024**3


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.pace = FAST if args.fast else NORMAL
        self.screen = Screen(color=not args.no_color and sys.stdout.isatty())
        self.keep = args.keep
        self.gpus = args.gpus
        self.tmp = Path(tempfile.mkdtemp(prefix="tna-demo-"))
        self.socket = str(self.tmp / "run" / "control.sock")
        self.request_file = self.tmp / "run" / "checkpoint" / "request.json"
        self.storage = self.tmp / "nas" / "run-demo"
        self.mode_file = self.tmp / "trainer-mode"  # "decode": the trainer decodes its batches itself
        self.fake: Any = None
        self.trainer: asyncio.subprocess.Process | None = None
        self.agent: asyncio.subprocess.Process | None = None
        self.sim: Any = None
        self.trainer_state = "training"  # training | decoding | saving | gone
        self.seen_events: set[str] = set()
        self.milestones: dict[str, float] = {}
        self.html: str | None = args.html
        self.phases: list[tuple[float, str]] = []  # (wall time, the job's phase): for the page's test
        self.started_at = time.time()
        self._tasks: list[asyncio.Task[None]] = []

    # --- set-up ------------------------------------------------------------------------------------

    def _fake_nvml(self) -> dict[str, str]:
        """Build and start the fake GPUs; the environment the agent needs to see them."""
        from agent.devtools.fake_nvml import FakeNvml, library_dir

        try:
            lib = library_dir(build=True)
        except (OSError, Exception) as e:  # no make or cc: run on, without GPUs
            self.screen.say("demo", f"fake NVML unavailable ({type(e).__name__}); GPU telemetry off")
            return {}
        self.fake = FakeNvml(self.tmp / "nvml-state.json", gpus=self.gpus)
        return {"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_STATE": str(self.fake.path)}

    def _config(self, with_gpus: bool) -> Path:
        discover = '"nvml"' if with_gpus else f'"cmdline:{self.storage}"'
        text = f"""
[agent]
interval = "{self.pace.interval}"
state_dir = "{self.tmp / "state"}"
runtime_dir = "{self.tmp / "run"}"
log_format = "json"
[http]
listen = "127.0.0.1:0"
control_socket = "{self.socket}"
[preemption]
provider = "alibaba"
endpoint = "{self.sim.url}"
poll_interval = "{self.pace.poll}"
[trainer]
discover = [{discover}]
signal = "SIGUSR1"
discovery_file = "{self.tmp / "run" / "agent.json"}"
{classifier_config(self.pace)}{advice_config()}"""
        path = self.tmp / "agent.toml"
        path.write_text(text)
        return path

    async def start(self) -> None:
        from tna_client import ENV_REQUEST_FILE  # not at import: every CLI run, the daemon too, loads this

        from agent.devtools.simulator import start_simulator

        s = self.screen
        s.block(s.paint("training-node-agent demo", "1") + " — an input-bound job, then a spot reclaim")
        s.block(s.paint(f"no root, GPU or cloud: everything runs on 127.0.0.1 in {self.tmp}\n", "2"))
        self.sim = await start_simulator(Cloud.ALIBABA)
        s.say("demo", f"metadata simulator playing Alibaba Cloud ECS at {self.sim.url}")
        env_gpu = await asyncio.to_thread(self._fake_nvml)
        if env_gpu:
            s.say("demo", f"{self.gpus} fake H100 GPUs (fake libnvidia-ml.so.1 via LD_LIBRARY_PATH)")
        self.trainer = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agent.devtools.demo_trainer",
            "--checkpoint-dir",
            str(self.storage),
            "--save-seconds",
            str(self.pace.save_seconds),
            "--step-seconds",
            str(self.pace.step_seconds),
            "--print-every",
            str(self.pace.print_every),
            "--prefix",
            "",
            "--mode-file",
            str(self.mode_file),
            "--decode-seconds",
            str(self.pace.decode_seconds),
            env={**os.environ, ENV_REQUEST_FILE: str(self.request_file)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self._tasks.append(asyncio.create_task(self._trainer_output()))
        if self.fake is not None:
            for i in range(self.gpus):
                self.fake.device(i)["processes"] = [{"pid": self.trainer.pid, "used_memory_bytes": 61 * GIB}]
            self.fake.write()
            self._tasks.append(asyncio.create_task(self._animate_gpus()))
        config = self._config(bool(env_gpu))
        self.agent_log = open(self.tmp / "agent.log", "wb")  # noqa: SIM115
        self.agent = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agent",
            "run",
            "--config",
            str(config),
            env={**os.environ, **env_gpu, "PYTHONUNBUFFERED": "1"},
            stdout=self.agent_log,
            stderr=asyncio.subprocess.STDOUT,
        )
        await self._wait_agent()
        s.say("demo", f"agent running (pid {self.agent.pid}); control socket {self.socket}")

    async def _wait_agent(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.agent is not None
            if self.agent.returncode is not None:
                raise DemoFailed(
                    f"the agent exited with {self.agent.returncode}; see {self.tmp / 'agent.log'}"
                )
            with contextlib.suppress(ConnectionError, OSError):
                code, _ = await self._control("GET", "/status")
                if code == 200:
                    return
            await asyncio.sleep(0.2)
        raise DemoFailed("the agent did not come up within 30 s")

    async def _control(self, method: str, path: str) -> tuple[int, Any]:
        from agent.runtime.control import control_request

        return await control_request(self.socket, method, path, timeout=10)

    # --- the moving parts --------------------------------------------------------------------------

    async def _trainer_output(self) -> None:
        assert self.trainer is not None and self.trainer.stdout is not None
        while line := await self.trainer.stdout.readline():
            text = line.decode(errors="replace").rstrip()
            if "checkpoint requested" in text:
                self.trainer_state = "saving"
                self.milestones.setdefault("trainer_saw", time.monotonic())
            if "ack sent" in text:
                self.milestones.setdefault("trainer_acked", time.monotonic())
            self.screen.say("trainer", text)
        self.trainer_state = "gone"

    async def _animate_gpus(self) -> None:
        """Busy GPUs while training; starved while the trainer decodes its batches or writes the
        checkpoint; empty once it exits."""
        rng = random.Random(7)
        while True:
            for i in range(self.gpus):
                d = self.fake.device(i)
                if self.trainer_state == "training":
                    d.update(
                        utilization_gpu=rng.randint(94, 99),
                        utilization_memory=rng.randint(55, 70),
                        power_mw=rng.randint(610_000, 690_000),
                        temperature_c=rng.randint(64, 71),
                        sm_active=rng.uniform(78, 86),
                        tensor_active=rng.uniform(40, 52),
                        dram_active=rng.uniform(30, 40),
                        memory_used_bytes=62 * GIB,
                    )
                    self.fake.advance(i, 1.0, pcie_rx=2e9, nvlink_rx=150e9, nvlink_tx=150e9)
                else:
                    d.update(utilization_gpu=rng.randint(0, 3), power_mw=rng.randint(90_000, 120_000))
                    d.update(sm_active=0.5, tensor_active=0.0, dram_active=1.0)
                    if self.trainer_state == "gone":
                        d.update(processes=[], memory_used_bytes=0)
            self.fake.write()
            await asyncio.sleep(1.0)

    async def _status(self) -> dict[str, Any]:
        code, body = await self._control("GET", "/status")
        return body if code == 200 and isinstance(body, dict) else {}

    async def _advice(self, since: float) -> dict[str, Any]:
        """The agent's advice over the last ``since`` seconds: the phase on screen, not the run."""
        code, body = await self._control("GET", f"/advice?since={since:.1f}")
        return body if code == 200 and isinstance(body, dict) else {}

    async def _events(self) -> list[dict[str, Any]]:
        code, body = await self._control("GET", "/events")
        if code != 200 or not isinstance(body, list):
            return []
        # the agent keeps its last 100 events: tell new ones by content, not position
        new = []
        for ev in body:
            key = json.dumps(ev, sort_keys=True, default=str)
            if key not in self.seen_events:
                self.seen_events.add(key)
                new.append(ev)
        return new

    # --- the story ---------------------------------------------------------------------------------

    async def watch_node(self) -> None:
        s = self.screen
        s.say("demo", "watching the node: this is what the agent sees every tick")
        end = time.monotonic() + self.pace.telemetry_seconds
        found = False
        while time.monotonic() < end or not found:
            if time.monotonic() > end + 20:
                raise DemoFailed("the agent found no training process to protect")
            st = await self._status()
            s.say("node", telemetry_line(st))
            targets = (st.get("checkpoint") or {}).get("targets") or []
            if targets and not found:
                found = True
                t = targets[0]
                ready = "SIGUSR1 handler installed" if t["handler"] == HandlerState.HANDLER else t["handler"]
                s.say(
                    "agent",
                    f"training process found: pid {t['pid']} ({t['comm']}) via {t['source']}, {ready}",
                )
            await asyncio.sleep(2.0 if not self.screen.color else 1.5)

    def _decode(self, on: bool) -> None:
        """The trainer decodes every batch itself (on) or is fed by workers again; the GPUs follow."""
        tell_trainer(self.mode_file, on)
        self.trainer_state = "decoding" if on else "training"
        self.phases.append((time.time(), "data/cpu" if on else "compute"))

    async def reclaim(self) -> dict[str, Any]:
        s = self.screen
        await self._events()  # skip what happened before the notice
        notice = self.sim.state.add_notice(NoticeKind.SPOT_TERMINATION, seconds=300)
        self.phases.append((time.time(), "reclaim"))
        announced = time.monotonic()
        s.say(
            "cloud",
            f"Alibaba Cloud will reclaim this spot instance: termination-time "
            f"{notice.deadline:%H:%M:%SZ} (in 300 s)",
        )
        done = False
        deadline = time.monotonic() + 60
        while not done:
            if time.monotonic() > deadline:
                raise DemoFailed("no ack within 60 s of the notice")
            for ev in await self._events():
                done = self._narrate(ev, announced) or done
            await asyncio.sleep(0.2)
        code, report = await self._control("GET", "/checkpoint/report")
        if code != 200:
            raise DemoFailed(f"no report: {report}")
        return report

    def _narrate(self, ev: dict[str, Any], announced: float) -> bool:
        s = self.screen
        if ev.get("type") == "preemption" and not ev.get("withdrawn"):
            s.say(
                "agent",
                f"notice detected {time.monotonic() - announced:.1f} s after it appeared: {ev['kind']}, "
                f"{ev.get('seconds_remaining') or 0:.0f} s left",
            )
        elif ev.get("type") == "checkpoint":
            phase = ev["phase"]
            if phase == CheckpointPhase.REQUESTED:
                for t in ev.get("targets", []):
                    s.say(
                        "agent", f"SIGUSR1 → {t.replace(': signalled', '')}  ✓   (request file written too)"
                    )
            elif phase == CheckpointPhase.COMPLETED:
                s.say(
                    "agent",
                    f"ack received: checkpoint durable in {ev['duration_seconds']:.1f} s ({ev['detail']})",
                )
                return True
            elif phase in CHECKPOINT_ENDS:  # completed is the one good end, above
                s.say("fail", f"{phase}: {ev.get('detail')}")
                if phase in (CheckpointPhase.MISSED, CheckpointPhase.CANCELED):
                    raise DemoFailed(f"the checkpoint was {phase}")
        return False

    def show_report(self, report: dict[str, Any]) -> None:
        from agent.checkpoint.report import render_report

        self.screen.block("")
        self.screen.block(render_report(report, color=self.screen.color))
        saved = sorted(self.storage.glob("*.ckpt.json"))
        self.screen.block("")
        if saved:
            self.screen.block(f"checkpoint on the (pretend) shared storage: {saved[-1]}")
        self.screen.block(
            "next: `training-node-agent drill` rehearses this on a real node; docs/checkpoint.md sets up "
            "PyTorch, Lightning and Hugging Face"
        )

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for proc in (self.trainer, self.agent):
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 6)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
        if self.sim is not None:
            await self.sim.close()
        if getattr(self, "agent_log", None):
            self.agent_log.close()
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)

    async def run(self) -> int:
        try:
            async with asyncio.timeout(self.pace.limit_seconds):
                await self.start()
                await self.watch_node()
                if self.fake is not None:  # without GPUs there is nothing to starve
                    await input_bound(self.screen, self.pace, self._status, self._decode, self._advice)
                report = await self.reclaim()
                assert self.trainer is not None
                await asyncio.wait_for(self.trainer.wait(), 15)
                self.screen.say("trainer", f"exited with status {self.trainer.returncode}")
                self.show_report(report)
                if self.html:  # the run as a picture; beside it, when the demo changed the job's phase
                    page = await fetch_page(self._control, self.started_at - 2, Path(self.html), self.phases)
                    self.screen.block(
                        f"the run as a picture: {page} (training-node-agent report --html FILE)"
                    )
                ok = report.get("verdict") == DrillVerdict.SAFE and self.trainer.returncode == 0
                return 0 if ok else 1
        except (DemoFailed, TimeoutError) as e:
            why = str(e) or f"the demo took longer than {self.pace.limit_seconds:.0f} s"
            self.screen.say("fail", f"demo failed: {why}")
            self.keep = True
            self.screen.block(f"agent log kept in {self.tmp / 'agent.log'}")
            return 1
        finally:
            await self.close()


def cmd_demo(args: argparse.Namespace) -> int:
    """``training-node-agent demo`` (its arguments: agent/cli/demo.py)."""
    return asyncio.run(Demo(args).run())
