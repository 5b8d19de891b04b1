"""The agent on real training: its verdict over time while a small model trains each way, and what
it costs the trainer's steps (the agent sampling, then stopped, alternating in one run)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from realgpu.agent_run import Agent, verdict_row
from realgpu.record import Partial, Skip
from realgpu.trainer import quantile, read_report, step_stats

SCRIPT = Path(__file__).resolve().parents[1] / "real_gpu.py"
# what the agent should say of each workload (the checkpoint's writes are no data bottleneck)
EXPECTED = {"compute": "compute", "input": "data/cpu", "checkpoint": "compute"}
TRAINER_START = 15.0  # seconds a trainer may spend importing torch and starting CUDA
PHASE_SECONDS = 10.0  # one phase of the cost measurement
PHASE_ORDER = ("off", "on", "on", "off")  # ABBA: a drift over the run weighs on both alike


def spawn_trainer(
    mode: str, seconds: float, work: Path, scratch: Path, device: str = "cuda"
) -> tuple[subprocess.Popen, Path]:
    report = work / f"steps-{mode}-{time.monotonic_ns()}.jsonl"
    output = open(work / f"trainer-{mode}.out", "ab")  # noqa: SIM115 - handed to the child
    cmd = [sys.executable, str(SCRIPT), "--trainer", mode, "--seconds", f"{seconds:.1f}"]
    cmd += ["--report", str(report), "--scratch", str(scratch), "--device", device]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)
    output.close()
    return proc, report


def end_trainer(proc: subprocess.Popen) -> int | None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


def started_agent(ctx: Partial, work: Path) -> Agent:
    agent = Agent(work)
    ready = agent.start()
    ctx.put("agent", {"port": agent.port, "ready_after_s": ready, "config": agent.config.read_text()})
    return agent


def log_agent_tail(ctx: Partial, agent: Agent, lines: int = 200) -> None:
    for line in agent.tail(lines).splitlines():
        ctx.log(f"agent| {line}")


def agent_training(ctx: Partial, work: Path, scratch: Path) -> None:
    agent = started_agent(ctx, work)
    try:
        each = (ctx.left() - 10) / len(EXPECTED)
        if each < 30:
            raise Skip(f"{each:.0f} s a workload is too short for a verdict (the first comes 20-25 s in)")
        for mode, expected in EXPECTED.items():
            ctx.log(f"workload {mode} for {each:.0f} s")
            ctx.attempt(mode, lambda m=mode, e=expected: watch(ctx, agent, m, e, each, work, scratch))
    finally:
        ctx.put("agent_exit", agent.stop())
        log_agent_tail(ctx, agent)


def watch(
    ctx: Partial,
    agent: Agent,
    mode: str,
    expected: str,
    seconds: float,
    work: Path,
    scratch: Path,
    device: str = "cuda",
    trainer_start: float = TRAINER_START,
) -> dict[str, Any]:
    """Train ``mode`` for about ``seconds`` and read the agent's verdict once a second."""
    start = time.monotonic()
    proc, report = spawn_trainer(mode, seconds - trainer_start, work, scratch, device)
    timeline: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    last = object()
    try:
        while proc.poll() is None and time.monotonic() - start < seconds and ctx.left() > 5:
            t = round(time.monotonic() - start, 1)
            try:
                status = agent.status()
            except OSError as e:
                timeline.append({"t": t, "error": str(e)})
            else:
                row = verdict_row(status)
                timeline.append({"t": t, **row})
                if row["label"] != last:
                    last = row["label"]
                    c = status.get("classifier") or {}
                    changes.append({"t": t, **row, **{k: c.get(k) for k in ("reasons", "hint", "scores")}})
            time.sleep(max(0.0, 1.0 - (time.monotonic() - start - t)))
    finally:
        code = end_trainer(proc)
    steps = read_report(report)
    first_step = next((r["end"] - start for r in steps if "end" in r), None)
    right = [r for r in timeline if r.get("label") == expected]
    first_right = right[0]["t"] if right else None
    after = [r for r in timeline if first_right is not None and r["t"] >= first_right]
    summary = next((r for r in steps if r.get("event") == "summary"), None)
    why = next((c for c in changes if c.get("label") == expected), {})
    return {
        "expected": expected,
        "trainer_exit": code,
        "trainer": summary or step_stats([r["s"] for r in steps if "end" in r]),
        "first_step_s": first_step,
        "first_right_s": first_right,
        "first_right_after_first_step_s": (
            first_right - first_step if first_right is not None and first_step is not None else None
        ),
        "first_right_reasons": why.get("reasons"),
        "right_share_after_first_right": len(right) / len(after) if after else None,
        "changes": changes,
        "timeline": timeline,
        "trainer_output_tail": _tail(work / f"trainer-{mode}.out") if code not in (0, None) else None,
    }


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def agent_cost(ctx: Partial, work: Path, scratch: Path) -> None:
    """The compute job's step times with the agent sampling and with it stopped (SIGSTOP), in phases
    of PHASE_SECONDS in ABBA order; each phase's first second is left out (the switch itself)."""
    agent = started_agent(ctx, work)
    proc, report = spawn_trainer("compute", ctx.left() - 10, work, scratch)
    phases: list[dict[str, Any]] = []
    try:
        _wait_first_step(ctx, proc, report)
        time.sleep(3)  # past the first steps' allocations and cuBLAS's choices
        i = 0
        while proc.poll() is None and ctx.left() > PHASE_SECONDS + 8:
            kind = PHASE_ORDER[i % len(PHASE_ORDER)]
            agent.pause() if kind == "off" else agent.resume()
            t0, cpu0 = time.monotonic(), agent.cpu_seconds()
            time.sleep(PHASE_SECONDS)
            t1, cpu1 = time.monotonic(), agent.cpu_seconds()
            cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
            phases.append({"kind": kind, "t0": t0, "t1": t1, "agent_cpu_s": cpu})
            i += 1
        agent.resume()
    finally:
        ctx.put("trainer_exit", end_trainer(proc))
        ctx.put("agent_exit", agent.stop())
        log_agent_tail(ctx, agent, 50)
    steps = [r for r in read_report(report) if "end" in r]
    ctx.put("phases", [{**p, **_steps_in(steps, p)} for p in phases])
    by_kind = {
        k: [r["s"] for p in phases if p["kind"] == k for r in _rows_in(steps, p)] for k in ("on", "off")
    }
    stats = {k: step_stats(v) for k, v in by_kind.items()}
    ctx.put("with_agent", stats["on"])
    ctx.put("without_agent", stats["off"])
    if by_kind["on"] and by_kind["off"]:
        on, off = sorted(by_kind["on"]), sorted(by_kind["off"])
        ctx.put("p50_ratio", quantile(on, 0.5) / quantile(off, 0.5))
        ctx.put("p99_ratio", quantile(on, 0.99) / quantile(off, 0.99))
    ctx.put(
        "method", "agent SIGSTOPped (off) or running (on), phases of 10 s in ABBA order, first second out"
    )


def _wait_first_step(ctx: Partial, proc: subprocess.Popen, report: Path) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60 and ctx.left() > PHASE_SECONDS:
        if proc.poll() is not None:
            raise RuntimeError(f"the trainer exited with {proc.returncode} before its first step")
        if any("end" in r for r in read_report(report)):
            return
        time.sleep(0.5)
    raise TimeoutError("the trainer made no step in time")


def _rows_in(steps: list[dict[str, Any]], phase: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in steps if phase["t0"] + 1.0 <= r["end"] <= phase["t1"]]


def _steps_in(steps: list[dict[str, Any]], phase: dict[str, Any]) -> dict[str, Any]:
    return step_stats([r["s"] for r in _rows_in(steps, phase)])
