"""Check the fake NVML's H200 profile against a recording of the real GPU made by bench/real_gpu.py.

    .venv/bin/python bench/real_gpu_fixture.py bench/out/real_gpu.json

The fake's side is asked, not copied: the same probe runs against the fake library with one GPU
named "NVIDIA H200" (the name picks the fake's product defaults), and a power and utilization step is
played through the fake's running integrals. Compared:

- which calls answer, and with which error (each NVML call, each field value, each GPM metric), as
  root and as nobody;
- the sample buffers: period, depth and the clock of their timestamps;
- GPM windows: what 50, 100 and 200 ms between samples answer;
- how power (usage, the average and instant fields, the energy counter) and utilization follow a
  step: the seconds to 90% (their averaging).

Prints each difference and exits 1 if there is any, 0 if none. No recording of a real GPU exists yet
(issue 33 was lent no GPU machine): the test runs this on a recording made against the fake itself.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(BENCH), str(REPO)]

from realgpu.cuda_work import STEP_KEYS  # noqa: E402
from realgpu.nvml_timing import follow, power_row  # noqa: E402

H200 = "NVIDIA H200"
PROBES = ("nvml_probe", "nvml_probe_unprivileged")
SAMPLE_PERIOD_TOLERANCE = 0.1  # share of the period
STEP_TOLERANCE_S = 0.2  # the real step is read at 10 Hz


# --- the fake's side ----------------------------------------------------------------------------------


def fake_profile(work: Path) -> dict[str, Any]:
    """The probe's answers from the fake with one H200, and the fake's answer to a step."""
    from agent.devtools.fake_nvml import device, library_dir, state, write_state

    lib = library_dir()
    os.chmod(work, 0o755)  # the probe also runs as nobody, who must read the state
    path = work / "nvml.json"
    write_state(path, state([device(0, name=H200)]))
    os.chmod(path, 0o644)
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib), "FAKE_NVML_STATE": str(path)}
    cmd = [sys.executable, str(BENCH / "real_gpu.py"), str(work / "out"), "--stages", ",".join(PROBES)]
    cmd += ["--nvml-seconds", "1.5", "--budget-seconds", "90"]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, timeout=120)
    stages = json.loads((work / "out" / "real_gpu.json").read_text())["stages"]
    return {"name": H200, "stages": stages, "step": fake_step(path, lib / "libnvidia-ml.so.1")}


def fake_step(path: Path, library: Path) -> dict[str, Any]:
    """Idle, then from one instant on busy, through the fake's running integrals (docs/fake-nvml.md):
    how long each reading takes to cover 90% of the step."""
    import pynvml

    from agent.devtools.fake_nvml import device, state, write_state

    idle: dict[str, Any] = {"power_mw": 75_000, "utilization_gpu": 0, "utilization_memory": 0}
    busy: dict[str, Any] = {"power_mw": 600_000, "utilization_gpu": 100, "utilization_memory": 40}
    write_state(path, state([device(0, name=H200, **idle)]))
    os.environ["FAKE_NVML_STATE"] = str(path)
    with pynvml.libLoadLock:
        pynvml.nvmlLib = ctypes.CDLL(str(library))
        getattr(pynvml, "_nvmlGetFunctionPointer_cache", {}).clear()
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        rows = _poll(handle, 0.5)
        t_load = time.monotonic()
        history = [
            {"at": t_load - 3.0, **dict.fromkeys(idle, 0.0)},
            {"at": t_load, **{k: float(v) * 3.0 for k, v in idle.items()}},
        ]
        write_state(path, state([device(0, name=H200, integrals=history, **busy)]))
        rows += _poll(handle, 2.5)
    finally:
        pynvml.nvmlShutdown()
    return {key: follow(rows, key, t_load, None) for key in STEP_KEYS if key != "energy_derived_mw"}


def _poll(handle: Any, seconds: float) -> list[dict[str, Any]]:
    rows, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        rows.append(power_row(handle))
        time.sleep(0.05)
    return rows


# --- the comparison -----------------------------------------------------------------------------------


def answers(node: Any, prefix: str = "") -> dict[str, str]:
    """Every answer under ``node`` as path -> "ok" or its error's name."""
    out: dict[str, str] = {}
    if not isinstance(node, dict):
        return out
    if "error" in node and ("value" in node or "ms" in node):
        err = node["error"]
        out[prefix] = "ok" if err is None else str(err.get("name") if isinstance(err, dict) else err)
        return out
    for key, value in node.items():
        out.update(answers(value, f"{prefix}.{key}" if prefix else key))
    return out


def gpm_answers(intervals: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for window, rows in (intervals or {}).items():
        if not isinstance(rows, list) or not rows:
            continue
        row = rows[-1]
        if row.get("error"):
            out[window] = row["error"].get("name", "error")
            continue
        for metric, value in (row.get("metrics") or {}).items():
            out[f"{window}.{metric}"] = value["error"] if isinstance(value, dict) else "ok"
    return out


def calls_of(stage: dict[str, Any]) -> dict[str, str]:
    result = stage.get("result") or {}
    gpu0 = (result.get("gpus") or {}).get("0") or {}
    out = answers(result.get("system"), "system")
    out.update(answers(gpu0.get("agent_calls"), "agent"))
    out.update(answers(gpu0.get("soon_calls"), "soon"))
    out.update({f"gpm.{k}": v for k, v in gpm_answers(result.get("gpm_intervals")).items()})
    return out


def samples_of(stage: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for kind, got in ((stage.get("result") or {}).get("samples") or {}).items():
        whole = got.get("whole_buffer") or {}
        out[kind] = {
            "period_ms": whole.get("gap_ms_median"),
            "depth": whole.get("count"),
            "clock": (got.get("clock") or {}).get("closest"),
            "error": (got.get("error") or {}).get("name"),
        }
    return out


def recorded_step(recording: dict[str, Any]) -> dict[str, Any] | None:
    duty = recording["stages"].get("duty_cycles") or {}
    step = (duty.get("result") or {}).get("power_step")
    return step if isinstance(step, dict) and "rows" in step else None


def compare(recording: dict[str, Any], fake: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(differences, notes): what the fake answers otherwise than the GPU did, and what the recording
    lacks for a comparison."""
    diffs: list[str] = []
    notes: list[str] = []
    for probe in PROBES:
        rec, ours = recording["stages"].get(probe), fake["stages"].get(probe)
        if not rec or rec.get("status") != "ok":
            notes.append(f"{probe}: not in the recording ({(rec or {}).get('status', 'absent')})")
            continue
        if not ours or ours.get("status") != "ok":
            notes.append(f"{probe}: the fake's run has none ({(ours or {}).get('status', 'absent')})")
            continue
        real_calls, fake_calls = calls_of(rec), calls_of(ours)
        for name in sorted(set(real_calls) | set(fake_calls)):
            a, b = real_calls.get(name, "not asked"), fake_calls.get(name, "not asked")
            if a != b:
                diffs.append(f"{probe} {name}: the GPU answered {a}, the fake {b}")
        real_s, fake_s = samples_of(rec), samples_of(ours)
        for kind in sorted(set(real_s) | set(fake_s)):
            diffs += _sample_diffs(probe, kind, real_s.get(kind, {}), fake_s.get(kind, {}))
    step = recorded_step(recording)
    if step is None:
        notes.append("the power and utilization step: not in the recording (duty_cycles did not run)")
    else:
        diffs += _step_diffs(step, fake["step"])
    return diffs, notes


def _step_diffs(real: dict[str, Any], fake: dict[str, Any]) -> list[str]:
    out = []
    for key, ours in fake.items():
        a, b = (real.get(key) or {}).get("rise_90_s"), (ours or {}).get("rise_90_s")
        if a is None or b is None:
            if (a is None) != (b is None):
                out.append(f"step {key}: rise to 90% on the GPU {a} s, on the fake {b} s")
        elif abs(a - b) > STEP_TOLERANCE_S:
            out.append(f"step {key}: rise to 90% on the GPU {a:.2f} s, on the fake {b:.2f} s")
    return out


def _sample_diffs(probe: str, kind: str, real: dict[str, Any], fake: dict[str, Any]) -> list[str]:
    out = []
    for key in ("error", "depth", "clock"):
        if real.get(key) != fake.get(key):
            out.append(f"{probe} samples {kind} {key}: the GPU {real.get(key)}, the fake {fake.get(key)}")
    a, b = real.get("period_ms"), fake.get("period_ms")
    if (a is None) != (b is None) or (a and b and abs(a - b) > SAMPLE_PERIOD_TOLERANCE * b):
        out.append(f"{probe} samples {kind} period: the GPU {a} ms, the fake {b} ms")
    return out


def described(recording: dict[str, Any]) -> str:
    """The recorded GPU's name and driver, as NVML gave them."""
    result = (recording["stages"].get("nvml_probe") or {}).get("result") or {}
    name = ((result.get("gpus") or {}).get("0") or {}).get("agent_calls", {}).get("nvmlDeviceGetName", {})
    driver = (result.get("system") or {}).get("nvmlSystemGetDriverVersion", {})
    return f"{name.get('value') or 'GPU unknown'}, driver {driver.get('value') or 'unknown'}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recording", type=Path, help="a real_gpu.json")
    ap.add_argument("--profile", type=Path, help="the fake's side saved by --save-profile (not asked again)")
    ap.add_argument("--save-profile", type=Path, help="also write the fake's side here")
    args = ap.parse_args(argv)
    try:
        recording = json.loads(args.recording.read_text())
        recording["stages"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"real_gpu_fixture.py: {args.recording}: not a real_gpu.json ({e})", file=sys.stderr)
        return 2
    if args.profile:
        fake = json.loads(args.profile.read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="real-gpu-fixture-") as tmp:
            fake = fake_profile(Path(tmp))
    if args.save_profile:
        args.save_profile.write_text(json.dumps(fake, indent=1) + "\n")
    print(f"recording: {args.recording} ({described(recording)}); the fake: one {fake['name']}")
    diffs, notes = compare(recording, fake)
    for note in notes:
        print(f"note: {note}")
    for diff in diffs:
        print(f"DIFF {diff}")
    print(f"{len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
