"""The stages' bodies, each run by the runner in a process of its own: environment, the NVML probe
(as root and as nobody), duty cycles, the spin. The agent's two stages are in agent_stages.py."""

from __future__ import annotations

import os
import platform
import pwd
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from realgpu.record import Partial, Skip

MAX_GPUS = 8  # answers for at most this many GPUs; the timed parts use GPU 0


def environment(ctx: Partial, opts: dict[str, Any]) -> None:
    """What this machine is, and whether torch sees CUDA and the agent can be imported (the runner
    skips the stages that need them, with the reason found here)."""
    ctx.put(
        "host",
        {
            "python": sys.version,
            "executable": sys.executable,
            "platform": platform.platform(),
            "uname": list(os.uname()),
            "proc_version": _read("/proc/version"),
            "cpus": os.cpu_count(),
            "uid": os.getuid(),
            "user": _user(),
        },
    )
    ctx.put("packages", {name: _version(name) for name in ("nvidia-ml-py", "torch", "pillow")})
    ctx.put("scratch", {"path": opts["scratch"], "filesystem": filesystem_of(opts["scratch"])})
    check = _agent_import_check(opts["repo"])  # beside torch's import: the two take seconds each
    ctx.attempt("cuda", _cuda)
    ctx.attempt("agent_import", lambda: _agent_import_result(check, ctx.left() - 0.5))


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def filesystem_of(path: str) -> str | None:
    """The type of the mount holding ``path`` (a checkpoint on tmpfs never touches a disk)."""
    best, kind = "", None
    real = os.path.realpath(path)
    for line in (_read("/proc/mounts") or "").splitlines():
        parts = line.split()
        if len(parts) < 3 or len(parts[1]) <= len(best):
            continue
        if real == parts[1] or real.startswith(parts[1].rstrip("/") + "/"):
            best, kind = parts[1], parts[2]
    return kind


def _agent_import_check(repo: str) -> subprocess.Popen:
    code = f"import sys; sys.path.insert(0, {repo!r}); import agent.runtime.daemon"
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _agent_import_result(check: subprocess.Popen, timeout: float) -> dict[str, Any]:
    """Whether the agent and its dependencies import with this interpreter (the last line of the
    traceback where not: a missing package names itself)."""
    t0 = time.monotonic()
    try:
        output, _ = check.communicate(timeout=max(0.1, timeout))
    except subprocess.TimeoutExpired:
        check.kill()
        check.communicate()
        return {"ok": None, "error": "the import check did not finish in time"}
    if check.returncode == 0:
        return {"ok": True, "waited_s": time.monotonic() - t0}
    lines = output.decode(errors="replace").strip().splitlines()
    return {"ok": False, "error": lines[-1] if lines else f"exit {check.returncode}", "output": lines[-20:]}


def _cuda() -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        import torch
    except Exception as e:
        return {"torch": False, "reason": f"no CUDA: torch not importable ({type(e).__name__}: {e})"}
    out: dict[str, Any] = {"torch": True, "import_s": time.monotonic() - t0, "version": torch.__version__}
    out["cuda_version"] = torch.version.cuda
    out["available"] = torch.cuda.is_available()
    if not out["available"]:
        out["reason"] = "torch.cuda.is_available() is False"
        return out
    out["device_count"] = torch.cuda.device_count()
    props = torch.cuda.get_device_properties(0)
    out["device"] = {"name": props.name, "capability": [props.major, props.minor]}
    out["multiprocessors"] = props.multi_processor_count
    return out


def nvml_probe(ctx: Partial, opts: dict[str, Any], full: bool = True) -> None:
    """Every NVML call the agent makes, and those it will need, on each GPU; then on GPU 0 the timed
    readings: GPM windows, the sample buffers and (``full``) power three ways side by side."""
    import pynvml

    from realgpu import nvml_calls, nvml_timing

    who = {"uid": os.getuid(), "gid": os.getgid(), "user": _user(), "groups": os.getgroups()}
    ctx.put("identity", {**who, "python": sys.executable})
    ctx.put("nvidia_ml_py", _version("nvidia-ml-py"))
    init = ctx.put("nvmlInit", nvml_calls.call("nvmlInit"))
    if init["error"] is not None:
        raise RuntimeError(f"nvmlInit: {init['error']['name']}: {init['error'].get('text')}")
    try:
        system = ctx.put("system", nvml_calls.system_answers())
        count = system["nvmlDeviceGetCount"]["value"] or 0
        handles = []
        gpus: dict[str, Any] = {}
        for i in range(min(count, MAX_GPUS)):
            got = nvml_calls.call("nvmlDeviceGetHandleByIndex", i)
            gpus[str(i)] = {"nvmlDeviceGetHandleByIndex": {**got, "value": None}}
            if got["error"] is None:
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                handles.append(handle)
                gpus[str(i)]["agent_calls"] = nvml_calls.agent_answers(handle)
                gpus[str(i)]["soon_calls"] = nvml_calls.soon_answers(handle)
            ctx.put("gpus", gpus)
        if not handles:
            raise Skip("no GPU answered nvmlDeviceGetHandleByIndex")
        h0 = handles[0]
        seconds = float(opts["nvml_seconds"])
        ctx.attempt("gpm_intervals", lambda: nvml_timing.gpm_intervals(h0))
        wait = _share(ctx, seconds * (0.4 if full else 0.2))
        ctx.attempt("samples", lambda: nvml_timing.study_samples(h0, wait))
        if full:
            span = _share(ctx, seconds * 0.5)
            ctx.attempt("power_side_by_side", lambda: nvml_timing.power_side_by_side(h0, span))
    finally:
        ctx.put("nvmlShutdown", nvml_calls.call("nvmlShutdown"))


def _share(ctx: Partial, wanted: float) -> float:
    """At most ``wanted`` seconds, and never more than half of what the stage has left."""
    return max(0.0, min(wanted, ctx.left() / 2))


def nvml_probe_unprivileged(ctx: Partial, opts: dict[str, Any]) -> None:
    nvml_probe(ctx, opts, full=False)


def _nvml_handle0() -> Any:
    import pynvml

    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetHandleByIndex(0)


def duty_cycles(ctx: Partial, opts: dict[str, Any]) -> None:
    from realgpu.cuda_work import Matmul, cuda_torch, duty_cycle, power_step
    from realgpu.nvml_timing import Poller

    torch = cuda_torch()
    handle = _nvml_handle0()
    mm = Matmul(torch)
    ctx.put("matmul", {"n": mm.n, "dtype": "bfloat16", "per_call_ms": mm.per_call_s * 1000})
    with Poller(handle) as poll:
        ctx.attempt("power_step", lambda: power_step(mm, poll))
        patterns = ((300, 200), (100, 400), (50, 950))
        each = max(3.0, min(10.0, (ctx.left() - 5) / len(patterns)))
        for busy, idle in patterns:
            ctx.attempt(f"{busy}/{idle}ms", lambda b=busy, i=idle: duty_cycle(mm, poll, b, i, each))
    ctx.put("poller_errors", poll.errors)


def spin(ctx: Partial, opts: dict[str, Any]) -> None:
    from realgpu import cuda_work
    from realgpu.nvml_timing import Poller

    torch = cuda_work.cuda_torch()
    handle = _nvml_handle0()
    mm = cuda_work.Matmul(torch)
    spin_s = max(3.0, min(8.0, ctx.left() - 12))
    with Poller(handle) as poll:
        ctx.attempt(
            "phases", lambda: cuda_work.spin(torch, mm, poll, idle_s=2.0, spin_s=spin_s, compute_s=3.0)
        )
    ctx.put("poller_errors", poll.errors)


def agent_training(ctx: Partial, opts: dict[str, Any]) -> None:
    from realgpu import agent_stages

    agent_stages.agent_training(ctx, Path(opts["work"]), Path(opts["scratch"]))


def agent_cost(ctx: Partial, opts: dict[str, Any]) -> None:
    from realgpu import agent_stages

    agent_stages.agent_cost(ctx, Path(opts["work"]), Path(opts["scratch"]))


BODIES: dict[str, Callable[[Partial, dict[str, Any]], None]] = {
    "environment": environment,
    "nvml_probe": nvml_probe,
    "nvml_probe_unprivileged": nvml_probe_unprivileged,
    "duty_cycles": duty_cycles,
    "spin": spin,
    "agent_training": agent_training,
    "agent_cost": agent_cost,
}
