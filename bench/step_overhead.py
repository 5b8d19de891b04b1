"""What ``guard.step()`` costs the training loop, beside an empty function call measured in the same run.

    .venv/bin/python bench/step_overhead.py              # 6 s of each
    .venv/bin/python bench/step_overhead.py --seconds 2

A real ``PreemptionGuard`` with a request file in a temporary folder, so its reports are written
(``steps-<pid>.json``, every ``--period`` seconds: 5 s is the default ``[trainer] step_report``; the
run uses 1 s so several reports fall inside it). Calls are timed in batches of ``--batch`` (a clock
read around each call would cost more than the call): the median and p99 are over the batches' mean
per call; the slowest single call is the one that wrote a report, timed on its own. Goal: median
<= 2 us.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "client"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import pct
from tna_client import PreemptionGuard


def empty() -> None:
    return None


def per_call(fn: Callable[[], None], seconds: float, batch: int) -> list[float]:
    out = []
    clock = time.perf_counter_ns
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = clock()
        for _ in range(batch):
            fn()
        out.append((clock() - t0) / batch / 1000.0)  # us per call
    return out


def report_cost(guard: PreemptionGuard, n: int = 50) -> list[float]:
    """One call that writes the report (made due by hand), in us."""
    out = []
    for _ in range(n):
        guard._step_due = 0.0
        t0 = time.perf_counter_ns()
        guard.step()
        out.append((time.perf_counter_ns() - t0) / 1000.0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--period", type=float, default=1.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        request = os.path.join(tmp, "request.json")
        os.environ["TNA_STEP_REPORT"] = str(args.period)
        guard = PreemptionGuard(signal=None, request_file=request)
        peer = per_call(empty, args.seconds, args.batch)
        ours = per_call(guard.step, args.seconds, args.batch)
        writes = report_cost(guard)
        reported = os.path.exists(os.path.join(tmp, f"steps-{os.getpid()}.json"))
        guard.uninstall()
    print(
        f"guard.step():        median {pct(ours, 0.5):.3f} us  p99 {pct(ours, 0.99):.3f} us  "
        f"({len(ours)} batches)"
    )
    print(f"empty function call: median {pct(peer, 0.5):.3f} us  p99 {pct(peer, 0.99):.3f} us  (peer)")
    print(f"ratio (median): {pct(ours, 0.5) / pct(peer, 0.5):.1f}x the empty call")
    print(f"a call that writes the report: median {pct(writes, 0.5):.1f} us, p99 {pct(writes, 0.99):.1f} us")
    print(f"report written: {reported}; goal median <= 2 us: {'met' if pct(ours, 0.5) <= 2.0 else 'MISSED'}")
    return 0 if reported and pct(ours, 0.5) <= 2.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
