"""Real PyTorch jobs in the lab (``lab/torchjob.py``): a DataLoader decoding real JPEG files with
``num_workers`` 0, 1 and many, a DataLoader reading from the throttled device, and
``torch.distributed`` (gloo) between two ranks launched by ``torchrun``, rank 0 on this host and rank 1
in the peer's network namespace, over the tc-shaped veth that reports 10 Gb/s.

Rank 0's fake GPUs are the ones the agent watches; rank 1 (the other node) drives its own state
file, following its own phase. The JPEG files are made at setup with Pillow.

The input-bound jobs of issue 23 run longer, for an agent at its default settings (``defaults``): a
DataLoader streaming 1 MiB objects over HTTP from ``lab.objserver`` in the peer's namespace through a
50 Mbit/s cap; ``num_workers=0`` decoding ~0.85 s a batch, then sleeping through the GPUs' step; and
a one-process pool mapping each batch synchronously while the training process waits.
"""

from __future__ import annotations

import io
import json
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.netns import REPO

if TYPE_CHECKING:
    from lab.harness import Lab, Scenario

JOB = REPO / "lab" / "torchjob.py"
IMAGES = 32
SECONDS = 12.0
DEFAULT_SECONDS = 42.0  # the default 20 s warm-up and 5 s evaluations, then a few to see it hold


def make_images(folder: Path, count: int = IMAGES) -> Path:
    """640x480 JPEGs (quality 90) of shapes over noise: ~6 ms of CPU each to decode and resize."""
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        path = folder / f"img{i:03d}.jpg"
        if path.exists():
            continue
        rnd = random.Random(i)
        im = Image.effect_noise((640, 480), 40).convert("RGB")
        draw = ImageDraw.Draw(im)
        for _ in range(30):
            x, y = rnd.randrange(640), rnd.randrange(480)
            box = (x, y, x + rnd.randrange(20, 200), y + rnd.randrange(20, 200))
            draw.ellipse(box, fill=(rnd.randrange(256), rnd.randrange(256), rnd.randrange(256)))
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=90)
        path.write_bytes(buf.getvalue())
    return folder


def scenarios(cpus: int, every: bool = False) -> dict[str, Scenario]:
    """The lab's PyTorch jobs; ``every``: also the ones at default settings that only ``make lab``
    runs (compute, compute with a synchronous save, throttled reads: ~50 s each, beyond the suite's
    budget)."""
    from lab.harness import Scenario

    jpeg: dict[str, Any] = {"mode": "jpeg", "gpu-seconds": 0.015, "batch": 16}
    many = max(4, min(8, cpus + 2))
    out = [
        Scenario("torch num_workers=0", (("cpu", SECONDS),), args={**jpeg, "workers": 0}, torch="jpeg"),
        Scenario("torch num_workers=1", (("cpu", SECONDS),), args={**jpeg, "workers": 1}, torch="jpeg"),
        Scenario(
            f"torch num_workers={many}",
            (("cpu", SECONDS),),
            # GPUs that need a batch far faster than the cores decode one
            args={**jpeg, "workers": many, "batch": 32, "gpu-seconds": 0.005},
            cpuset=min(2, cpus),  # every allowed core busy, on any box
            torch="jpeg",
        ),
        Scenario(
            "torch throttled reads",
            (("storage", SECONDS),),
            # 2 MiB a batch at 8 MiB/s: ~0.25 s of waiting a step against ~0.05 s of step, so the job
            # stays storage-bound on a loaded host too (1 MiB batches starved it 60-75% of the time,
            # and a busy box's slower steps tipped windows to compute)
            args={"mode": "direct", "workers": 2, "batch": 8, "sample-bytes": 256 << 10, "gpu-seconds": 0.03},
            torch="direct",
        ),
        Scenario(
            "torch all-reduce 4 MB, 50 Mbit/s link",
            (("network", SECONDS),),
            args={"mode": "dist", "elems": 1 << 20, "gpu-seconds": 0.08},
            link_mbit=50,
            torch="dist",
        ),
        Scenario(
            "torch streaming over HTTP, 50 Mbit/s link",
            (("network-input", DEFAULT_SECONDS),),
            # 4 MiB a batch at 50 Mbit/s: ~0.67 s on the link against a ~0.15 s step
            args={"mode": "stream", "workers": 2, "batch": 4, "object-bytes": 1 << 20, "gpu-seconds": 0.15},
            link_mbit=50,
            torch="stream",
            defaults=True,
        ),
        Scenario(
            "torch num_workers=0, host asleep during GPU work",
            (("cpu", DEFAULT_SECONDS),),
            # a batch of ~0.85 s of CPU decode (sized on the box it runs on), then a 0.3 s sleep: the
            # GPUs starved ~68% of the time at 0.75 s (collating a batch counts as waiting too)
            args={"mode": "jpeg", "workers": 0, "decode-seconds": 0.85, "gpu-seconds": 0.3},
            torch="jpeg",
            defaults=True,
        ),
        Scenario(
            "torch one pool worker, synchronous map",
            (("cpu", DEFAULT_SECONDS),),
            args={"mode": "pool", "decode-seconds": 0.75, "gpu-seconds": 0.25},
            torch="pool",
            defaults=True,
        ),
        Scenario(
            "torch straggler",
            (("sync-wait", SECONDS),),
            args={"mode": "dist", "elems": 4096, "gpu-seconds": 0.05, "straggle": 0.4},
            link_mbit=50,
            torch="dist",
        ),
    ]
    if every:
        compute: dict[str, Any] = {"mode": "compute", "batch": 16, "gpu-seconds": 0.35}
        direct: dict[str, Any] = {"mode": "direct", "workers": 2, "sample-bytes": 256 << 10}
        out += [
            Scenario(
                "torch compute",
                (("compute", DEFAULT_SECONDS),),
                args=compute,
                torch="compute",
                defaults=True,
            ),
            Scenario(
                "torch compute, a synchronous 64 MB save every 15 s",
                (("checkpoint", DEFAULT_SECONDS),),
                args={**compute, "save-every": 15, "save-bytes": 64 << 20},
                torch="compute",
                defaults=True,
            ),
            Scenario(
                "torch throttled reads, default settings",
                (("storage", DEFAULT_SECONDS),),
                # as "torch throttled reads", a step stretched to ~0.5 s: 4 MiB a batch at 8 MiB/s
                args={**direct, "batch": 16, "gpu-seconds": 0.1},
                torch="direct",
                defaults=True,
            ),
        ]
    return {s.name: s for s in out}


def _args(sc: Scenario, lab: Lab, state: Path, log: Path) -> list[str]:
    assert lab.data is not None
    regime = sc.schedule[0][0]
    out = [
        "--regime",
        regime,
        "--gpu-state",
        str(state),
        "--phase-log",
        str(log),
        "--seconds",
        str(sc.schedule[0][1]),
    ]
    out += ["--images", str(make_images(lab.workdir / "images")), "--data", str(lab.data.path)]
    out += ["--data-size", str(lab.data.size), "--checkpoint-dir", str(lab.workdir / "checkpoints")]
    if sc.write_bps:  # a slow volume: the saves cross the write throttle of the dataset's disk
        out += [
            "--save-direct",
            str(lab.data.path if lab.data.loop else lab.workdir / "checkpoints" / "slow.ckpt"),
        ]
    if lab.net is not None and sc.torch == "stream":
        out += ["--server", f"{lab.net.peer_ip}:{lab.net.port}"]
    for k, v in sc.args.items():
        out += [f"--{k}", str(v)]
    return out


# gloo's teardown once aborted a rank ("terminate called without an active exception", SIGABRT)
# after both had logged their last step, and the other rank then hung for the whole timeout: once
# every rank has said it finished, its exit no longer tells anything about the job the agent watched
TEARDOWN_GRACE = 15.0


def finished(logs: list[Path]) -> bool:
    """Every rank's phase log ends with its job finished (``torchjob.py``'s last record)."""
    for log in logs:
        try:
            lines = log.read_text().splitlines()
            if not lines or not json.loads(lines[-1]).get("finished"):
                return False
        except (OSError, ValueError):  # a last line still being written is not a finish
            return False
    return True


def _wait(procs: list[subprocess.Popen[bytes]], timeout: float, errs: list[Path], logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    done_at = None
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if done_at is None and finished(logs):
                done_at = time.monotonic()
            if done_at is not None and time.monotonic() - done_at > TEARDOWN_GRACE:
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    bad = [p.returncode for p in procs if p.returncode != 0]
    if bad and finished(logs):
        print(
            f"the PyTorch job finished; its teardown failed ({bad}), which the lab does not score",
            file=sys.stderr,
        )
        return
    if bad:
        texts = {e.name: e.read_text(errors="replace") for e in errs if e.exists()}
        first = " | ".join(last_error(t) or f"{name}: empty" for name, t in texts.items())
        tails = "\n".join(t[-4000:] for t in texts.values())
        # the first line is all that a CI summary shows of the message: the last error of each rank
        raise RuntimeError(f"the PyTorch job failed ({bad}): {first}\n{tails}")


def last_error(text: str) -> str:
    """The last line of ``text`` that names an error (a traceback's last line, a torchrun failure)."""
    lines = text.splitlines()
    named = [x for x in lines if re.search(r"(Error|Exception|Failed|failed)\b", x)]
    return (named or lines or [""])[-1].strip()[-300:]


# The lab's read throttle is on the whole disk that holds the dataset, and so also the venv: a trainer
# that faults torch's libraries in from a cold page cache reads them at the throttle's 4-12 MiB/s (a
# job that starts in 2 s took 35 s in a clean clone's suite, and its first steps ran slow while its
# kernels' pages came in). On a real node the code is not behind the dataset's NAS, so the lab reads
# the jobs' code in once, outside the cgroup, before the first job.
def read_in_code() -> None:
    """Import what a job imports, and read every shared library of torch and Pillow whole (a job's
    first ops fault in pages of libtorch_cpu that no import touches)."""
    import importlib
    import sysconfig

    for name in ("multiprocessing.pool", "PIL.JpegImagePlugin", "torch.distributed.run", "lab.objserver"):
        importlib.import_module(name)
    site = Path(sysconfig.get_paths()["purelib"])
    for folder in (site / "torch", site / "PIL", site / "pillow.libs"):
        for lib in folder.rglob("*.so*"):
            with open(lib, "rb") as f:
                while f.read(8 << 20):
                    pass


def warm_code() -> None:
    """:func:`read_in_code` in a process of its own, unthrottled."""
    cmd = [sys.executable, "-c", "from lab.torchlab import read_in_code; read_in_code()"]
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, timeout=300)


def run_job(sc: Scenario, lab: Lab, log: Path) -> None:
    """Run ``sc``'s PyTorch job to its end; rank 0's phase log goes to ``log``."""
    assert lab.gpus is not None and lab.cgroup is not None
    if not lab.code_warm:
        warm_code()
        lab.code_warm = True
    env = {**lab.trainer_env(), "OMP_NUM_THREADS": "1"}
    cgroup, cpuset = lab.cgroup, sc.cpuset is not None
    err0 = log.with_suffix(".err")
    timeout = sc.schedule[0][1] + 90
    if sc.torch != "dist":
        with open(err0, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, str(JOB), *_args(sc, lab, lab.gpus.path, log)],
                cwd=REPO,
                env=env,
                stdout=err,
                stderr=err,
                preexec_fn=lambda: cgroup.join(cpuset=cpuset),
            )
        _wait([proc], timeout, [err0], [log])
        return
    net = lab.net
    assert net is not None
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", net.host_ip]
    common += ["--master-port", str(net.port), "--max-restarts", "0"]
    other = log.with_name(log.stem + "-rank1.jsonl")
    state1 = lab.gpus.path.with_name(lab.gpus.path.stem + "-rank1.json")
    err1 = log.with_name(log.stem + "-rank1.err")
    rank1 = _args(sc, lab, state1, other)
    procs = []
    try:
        with open(err0, "wb") as e0, open(err1, "wb") as e1:
            procs.append(
                subprocess.Popen(
                    [torchrun, *common, "--node-rank", "0", str(JOB), *_args(sc, lab, lab.gpus.path, log)],
                    cwd=REPO,
                    env={**env, "GLOO_SOCKET_IFNAME": net.host_if},
                    stdout=e0,
                    stderr=e0,
                    preexec_fn=lambda: cgroup.join(cpuset=cpuset),
                )
            )
            procs.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", net.ns, torchrun, *common, "--node-rank", "1", str(JOB), *rank1],
                    cwd=REPO,
                    env={**env, "GLOO_SOCKET_IFNAME": net.peer_if},
                    stdout=e1,
                    stderr=e1,
                )
            )
        _wait(procs, timeout, [err0, err1], [log, other])
    finally:
        state1.unlink(missing_ok=True)
