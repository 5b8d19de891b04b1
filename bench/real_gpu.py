"""The real-GPU check (issue 33): one run, about 8 minutes on one GPU, that asks the driver what the
agent has only asked our fake NVML, and watches the agent judge real CUDA training.

    python3 bench/real_gpu.py OUT                       # every stage, 480 s at most
    python3 bench/real_gpu.py OUT --budget-seconds 120 --stages nvml_probe,spin
    make real-gpu-check                                 # OUT = build/real-gpu

Writes OUT/real_gpu.json (every stage with its status: ok, skipped with a reason, or failed with the
error and traceback, and what it measured) and OUT/real_gpu.log. Stages, each in a process of its own
with a deadline, each failing alone:

- environment: the host, the packages, whether torch sees CUDA and the agent can be imported;
- nvml_probe: every NVML call the agent makes and those it will need, their values or errors; the
  sample buffers (rate, depth, clock), GPM over 50/100/200 ms, power three ways side by side;
- nvml_probe_unprivileged: the same calls as ``nobody`` (root only);
- duty_cycles (CUDA): products on known duty cycles against utilization, the sample buffer and GPM;
  a power step, to see each power reading's averaging;
- spin (CUDA): a busy-waiting kernel, as a collective waits: utilization, SM activity, power;
- agent_training (CUDA): the agent's verdict while a model trains compute-bound, input-bound and
  with synchronous checkpoints;
- agent_cost (CUDA): the compute job's step times with the agent sampling and stopped, alternating.

Needs only the standard library, nvidia-ml-py and (for the CUDA stages) torch; the agent stages need
the agent's own dependencies importable (docs/gpu.md says how to carry them). ``--budget-seconds`` is a
hard limit: a watchdog ends the run at it, whatever is under way, with what it has written.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from realgpu.record import Partial, Skip, failure
from realgpu.runner import NAMES, Run


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", type=Path, help="folder for real_gpu.json and real_gpu.log")
    ap.add_argument("--budget-seconds", type=float, default=480.0, help="hard limit of the whole run")
    ap.add_argument("--stages", default=",".join(NAMES), help="comma-separated subset, in run order")
    ap.add_argument("--nvml-seconds", type=float, default=10.0, help="the NVML probe's timed readings")
    ap.add_argument(
        "--scratch", type=Path, help="where checkpoints are written (default: a temporary folder)"
    )
    # a stage's own process, started by the run
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    ap.add_argument("--until", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--partial", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--context", type=Path, help=argparse.SUPPRESS)
    # a trainer, started by the agent stages
    ap.add_argument("--trainer", help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=30.0, help=argparse.SUPPRESS)
    ap.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def stage_main(args: argparse.Namespace) -> int:
    from realgpu.stages import BODIES

    ctx = Partial(args.partial, args.stage, args.until)
    ctx.log(f"started as uid {os.getuid()}, {ctx.left():.1f} s to go")
    try:
        BODIES[args.stage](ctx, json.loads(args.context.read_text()))
    except Skip as e:
        ctx.finish("skipped", reason=str(e))
    except BaseException as e:
        ctx.finish("failed", **failure(e))
    else:
        ctx.finish("ok")
    ctx.log(f"{ctx.data['status']} {ctx.data.get('reason') or ctx.data.get('error') or ''}")
    return 0


def trainer_main(args: argparse.Namespace) -> int:
    from realgpu.trainer import train

    # a SIGTERM from the stage ends the loop through its finally: the report is flushed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    scratch = args.scratch or args.report.parent
    summary = train(args.trainer, args.seconds, args.report, args.device, scratch)
    with open(args.report, "a") as f:
        f.write(json.dumps({"event": "summary", **summary}) + "\n")
    return 0


def run_main(args: argparse.Namespace) -> int:
    asked = tuple(s.strip() for s in args.stages.split(",") if s.strip())
    unknown = [s for s in asked if s not in NAMES]
    if unknown or args.out is None:
        what = f"unknown stages {unknown}; known: {', '.join(NAMES)}" if unknown else "OUT is required"
        print(f"real_gpu.py: {what}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    opts = {
        "repo": str(Path(__file__).resolve().parent.parent),
        "nvml_seconds": args.nvml_seconds,
        "scratch": str(args.scratch.resolve()) if args.scratch else None,  # None: the run's own
    }
    code = Run(args.out, args.budget_seconds, asked, opts).run()
    print(f"wrote {args.out / 'real_gpu.json'} and {args.out / 'real_gpu.log'}")
    return code


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.stage:
        return stage_main(args)
    if args.trainer:
        return trainer_main(args)
    return run_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
