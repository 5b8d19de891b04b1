"""The run: each stage in a process of its own with a deadline, killed (with everything it started)
if it passes it, so a hung driver call or a stuck CUDA stream costs that stage alone; one JSON,
rewritten after every stage, and one log; a watchdog that ends the run at the overall budget,
whatever is under way, writing what it has."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from realgpu.record import write_json

BENCH = Path(__file__).resolve().parents[1]
SCRIPT = BENCH / "real_gpu.py"
REPO = BENCH.parent
JSON_NAME, LOG_NAME = "real_gpu.json", "real_gpu.log"
UNPRIVILEGED_USER = "nobody"


@dataclass(frozen=True)
class Stage:
    name: str
    planned: float  # seconds of the default 480 s budget; a budget of another size scales them
    minimum: float  # with less time than this left, the stage is skipped
    cuda: bool = False
    agent: bool = False
    unprivileged: bool = False


STAGES = (
    Stage("environment", 35, 3),
    Stage("nvml_probe", 30, 3),
    Stage("nvml_probe_unprivileged", 15, 3, unprivileged=True),
    Stage("duty_cycles", 60, 20, cuda=True),
    Stage("spin", 25, 12, cuda=True),
    Stage("agent_training", 190, 75, cuda=True, agent=True),
    Stage("agent_cost", 95, 40, cuda=True, agent=True),
)
NAMES = tuple(s.name for s in STAGES)
GRACE = 3.0  # seconds between a stage's own deadline and its kill
FINAL = 1.0  # seconds kept at the end for writing the result


class Run:
    def __init__(self, out: Path, budget: float, names: tuple[str, ...], opts: dict[str, Any]) -> None:
        self.out = out
        self.budget = budget
        self.stages = [s for s in STAGES if s.name in names]
        self.opts = opts
        self.start = time.monotonic()
        self.end = self.start + budget
        self.lock = threading.RLock()  # the signal handler may run while the main thread holds it
        self.closed = False
        self.current: subprocess.Popen | None = None
        self.work = Path(tempfile.mkdtemp(prefix="real-gpu-"))
        if not opts.get("scratch"):  # checkpoints go here unless --scratch names a disk
            (self.work / "scratch").mkdir()
            self.opts = {**opts, "scratch": str(self.work / "scratch")}
        self.log = open(out / LOG_NAME, "w", buffering=1)  # noqa: SIM115 - the run's whole life
        self.data: dict[str, Any] = {
            "schema": 1,
            "script": "bench/real_gpu.py",
            "commit": _commit(),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "budget_seconds": budget,
            "argv": sys.argv,
            "stages_asked": list(names),
            "finished": False,
            "ended_by": None,
            "stages": {},
        }

    # --- the whole run ----------------------------------------------------------------------------

    def run(self) -> int:
        watchdog = threading.Timer(max(0.0, self.end - time.monotonic()), self._expire, ("watchdog",))
        watchdog.daemon = True
        watchdog.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: self._expire(f"signal {signum}"))
        self.say(f"budget {self.budget:.0f} s; stages: {', '.join(s.name for s in self.stages)}")
        try:
            for i, stage in enumerate(self.stages):
                result = self._stage(stage, self.stages[i:])
                with self.lock:
                    if self.closed:
                        return 3
                    self.data["stages"][stage.name] = result
                    self._write()
                self.say(f"{stage.name}: {_verdict(result)}")
        finally:
            watchdog.cancel()
        return self._close("done", 0)

    def _expire(self, why: str) -> None:
        """The budget is spent (or we were told to stop): end the stage under way with everything it
        started, say so for it and the stages not reached, write, and leave."""
        proc = self.current
        if proc is not None:
            _kill_group(proc, patient=False)
        with self.lock:
            if self.closed:
                return
            for stage in self.stages:
                if stage.name in self.data["stages"]:
                    continue
                if proc is not None and stage.name == getattr(proc, "stage_name", None):
                    got = _outcome(proc.partial, None, True, time.monotonic() - self.start)  # type: ignore[attr-defined]
                    if got.get("timed_out"):
                        got["error"] = f"the run was ended ({why}) while it ran"
                    self.data["stages"][stage.name] = got
                else:
                    reason = f"not reached: the run was ended ({why})"
                    self.data["stages"][stage.name] = {"status": "skipped", "reason": reason}
        self.say(f"ended by {why}")
        self._close(why, 3)
        os._exit(3)

    def _close(self, why: str, code: int) -> int:
        with self.lock:
            if not self.closed:
                self.closed = True
                self.data["finished"] = why == "done"
                self.data["ended_by"] = why
                self._write()
                shutil.rmtree(self.work, ignore_errors=True)
                self.log.flush()
        return code

    def _write(self) -> None:
        self.data["wall_seconds"] = round(time.monotonic() - self.start, 3)
        write_json(self.out / JSON_NAME, self.data)

    def say(self, message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} [run] {message}"
        print(line, flush=True)
        self.log.write(line + "\n")

    # --- one stage --------------------------------------------------------------------------------

    def _stage(self, stage: Stage, remaining: list[Stage]) -> dict[str, Any]:
        reason = self._skip_reason(stage)
        if reason:
            return {"status": "skipped", "reason": reason}
        left = self.end - time.monotonic() - FINAL
        grace = min(GRACE, max(0.0, left) * 0.2)
        planned = sum(s.planned for s in remaining if not self._skip_reason(s))
        allowance = min(left - grace, stage.planned * left / planned) if planned else left - grace
        if allowance < stage.minimum * min(1.0, self.budget / 480):
            return {"status": "skipped", "reason": f"no time left ({max(0.0, allowance):.1f} s for it)"}
        t0 = time.monotonic()
        self.say(f"{stage.name}: {allowance:.1f} s")
        try:
            result = self._child(stage, t0 + allowance, grace)
        except Exception as e:  # the runner's own fault (a spawn that failed): this stage alone
            import traceback

            result = {
                "status": "failed",
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc(),
            }
        result["seconds"] = round(time.monotonic() - t0, 3)
        result["allowance_seconds"] = round(allowance, 3)
        return result

    def _skip_reason(self, stage: Stage) -> str | None:
        env = self.data["stages"].get("environment", {}).get("result", {})
        if stage.unprivileged and os.geteuid() != 0:
            return "not root: cannot run the probe as another user"
        cuda = env.get("cuda")
        said_no = isinstance(cuda, dict) and (cuda.get("torch") is False or cuda.get("available") is False)
        if stage.cuda and said_no:  # where the check itself broke, the stage finds out for itself
            return cuda.get("reason") or "no CUDA"
        agent = env.get("agent_import")
        if stage.agent and isinstance(agent, dict) and agent.get("ok") is False:
            return f"the agent cannot be imported here ({agent.get('error')}); see docs/gpu.md"
        return None

    def _child(self, stage: Stage, until: float, grace: float) -> dict[str, Any]:
        where = Path(tempfile.mkdtemp(dir=self.work, prefix=f"{stage.name}-"))
        python, script, kwargs = sys.executable, SCRIPT, dict[str, Any]()
        if stage.unprivileged:
            python, script, kwargs = self._as_nobody(where)
        partial = where / "partial.json"
        context = where / "context.json"
        context.write_text(json.dumps({**self.opts, "work": str(where)}))
        os.chmod(context, 0o644)
        cmd = [python, str(script), "--stage", stage.name, "--until", repr(until)]
        cmd += ["--partial", str(partial), "--context", str(context)]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
            start_new_session=True,  # its own process group: a kill reaches what it started
            cwd=script.parent,
            **kwargs,
        )
        proc.stage_name = stage.name  # type: ignore[attr-defined]
        proc.partial = partial  # type: ignore[attr-defined]
        self.current = proc
        try:
            proc.wait(max(0.0, until + grace - time.monotonic()))
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc)  # also what it left behind (an agent, a trainer)
            self.current = None
        return _outcome(partial, proc.returncode, timed_out, until - self.start)

    def _as_nobody(self, where: Path) -> tuple[str, Path, dict[str, Any]]:
        """An interpreter and a copy of the script that nobody can run, a folder it can write, and
        its uid and gid. pynvml is copied beside the script: the venv it comes from may sit where
        nobody may not enter (under /root, or a clone in a 0700 folder), and so may the script."""
        who = pwd.getpwnam(UNPRIVILEGED_USER)
        copy = where / "bench"
        shutil.copytree(BENCH / "realgpu", copy / "realgpu", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(SCRIPT, copy / SCRIPT.name)
        _copy_pynvml(copy)
        for path in (where, *copy.rglob("*"), copy):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        os.chown(where, who.pw_uid, who.pw_gid)
        os.chmod(self.work, 0o755)
        env = {**os.environ, "HOME": "/", "USER": UNPRIVILEGED_USER, "PYTHONDONTWRITEBYTECODE": "1"}
        python = sys.executable
        if not _others_may_run(python):  # a venv under /root: the system's python, with the copy's pynvml
            python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or python
        kwargs = {"user": who.pw_uid, "group": who.pw_gid, "extra_groups": [], "env": env}
        return python, copy / SCRIPT.name, kwargs


def _outcome(partial: Path, code: int | None, timed_out: bool, until: float) -> dict[str, Any]:
    try:
        data = json.loads(partial.read_text())
    except (OSError, ValueError):
        data = {"result": {}}
    finished = data.get("status") not in (None, "running")
    if timed_out and finished:  # it had said how it went; only its exit was slow
        data["killed_after_finishing"] = True
    elif timed_out:
        data.update(
            status="failed", timed_out=True, error=f"ran past its deadline ({until:.1f} s into the run)"
        )
    elif data.get("status") in (None, "running"):
        data.update(status="failed", error=f"the stage's process ended with {code} before saying how it went")
    data["exit_code"] = code
    return data


def _copy_pynvml(folder: Path) -> None:
    """This run's pynvml (a module, or a package in older releases) into ``folder``, found first
    there by the script beside it; without one, the stage says pynvml is missing."""
    try:
        import pynvml
    except ImportError:
        return
    source = Path(pynvml.__file__)
    if source.name == "__init__.py":
        shutil.copytree(source.parent, folder / "pynvml", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copy2(source, folder / source.name)


def _others_may_run(path: str) -> bool:
    """Whether a user outside root's group can execute ``path`` (every folder above it searchable)."""
    real = Path(os.path.realpath(path))
    return all(p.stat().st_mode & 0o001 for p in (real, *real.parents))


def _kill_group(proc: subprocess.Popen, patient: bool = True) -> None:
    """End the stage's process group (the group outlives its leader: a stopped agent, a trainer):
    SIGTERM, then SIGKILL; at once (``patient`` False) when the budget is spent."""
    steps = ((signal.SIGCONT, 0.0), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0))
    for sig, wait in steps if patient else ((signal.SIGKILL, 0.0),):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        if wait:
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(proc.pid):
                return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _verdict(result: dict[str, Any]) -> str:
    status = result.get("status")
    why = result.get("reason") or result.get("error") or ""
    return f"{status} ({result.get('seconds', 0):.1f} s){': ' + why if why else ''}"


def _commit() -> str | None:
    """HEAD's commit where this checkout has its .git (a copied tree may not)."""
    head = REPO / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            return (REPO / ".git" / ref[5:]).read_text().strip()
        return ref
    except OSError:
        return None
