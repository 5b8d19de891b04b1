"""The report page of a week: 7 days at one tick a second on an 8-GPU node, fed through the real
ledger and report parts (agent/devtools/report_run.py's Player: the sampler's snapshots, the ledger
at its default 1-minute slots, the report's timeline), then the page made from them, as
``report --html`` makes it. Printed: the time to make the page (best of ``--repeat``), its size, the
timeline file's size at its bound, the cost of a tick to the recorder, and the ratio against the
peer in the same run, the text ``report``'s render of the same ledger.

    .venv/bin/python bench/report_page.py [--days 7] [--gpus 8] [--repeat 5]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import structlog  # noqa: E402

from agent.cli.report import render  # noqa: E402
from agent.devtools.report_run import START, Player  # noqa: E402
from agent.report.gather import page_data  # noqa: E402
from agent.report.page import build_page  # noqa: E402
from agent.report.timeline import COARSE, FINE  # noqa: E402

# a day's phases, an hour each, so the week has verdict changes and every band to draw
DAY = ("compute", "compute", "data/cpu", "compute", "compute", "compute", "reclaim", "compute")
GOAL_SECONDS, GOAL_BYTES = 2.0, 2_000_000


def feed(state_dir: Path, days: float, gpus: int) -> tuple[Player, float, float]:
    """The week through the parts; returns the player, the end, and seconds per tick spent feeding."""
    p = Player(state_dir, "1m", gpus)
    ticks = int(days * 86400)
    t0 = time.perf_counter()
    for i in range(ticks + 1):
        phase = DAY[(i // 3600) % len(DAY)]
        p.tick(START + i, phase, hot=(i // 600) % 37 == 0)
    return p, START + ticks, (time.perf_counter() - t0) / ticks


def best(fn, repeat: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="tna-bench-report-") as d:
        p, end, per_tick = feed(Path(d), args.days, args.gpus)
        window = end - START
        tl = p.recorder.timeline
        t0 = time.perf_counter()
        stored = len(tl.to_text().encode())  # the first save after a start: every point's text
        first_save = time.perf_counter() - t0
        p.tick(end + 1, "compute")
        t0 = time.perf_counter()
        tl.to_text()  # a save on the loop: the new points' text, the rest kept
        next_save = time.perf_counter() - t0

        def page() -> str:
            data = page_data(p.ledger, tl, end, window, "bench-node", "bench")
            return build_page(data)

        def text() -> str:
            # what `report` prints: the control socket's summary, rendered (the GPU count is the status')
            return render({**p.ledger.summary(end, window), "gpus": p.gpus}, None)

        page_s, html = best(page, args.repeat)
        text_s, _ = best(text, args.repeat * 20)
        size = len(str(html).encode())
    print(f"history: {args.days:g} days at 1 tick/s, {args.gpus} GPUs, ledger slots of 1 min")
    print(f"timeline held: {len(tl.fine)} fine + {len(tl.coarse)} coarse points, {len(tl.marks)} marks")
    held = len(tl.fine) + len(tl.coarse)
    bound = stored / held * (FINE + COARSE) if held else 0.0
    print(
        f"timeline file: {stored / 1e6:.2f} MB, {bound / 1e6:.2f} MB at its bound of {FINE + COARSE} points"
    )
    print(
        f"timeline text on the loop: {first_save * 1e3:.0f} ms for every point (once, when a saved file"
        f" is read back), {next_save * 1e3:.1f} ms a save after"
    )
    print(
        f"recorder + ledger per tick while feeding: {per_tick * 1e6:.0f} us (snapshot made by hand included)"
    )
    print(
        f"page: made in {page_s:.3f} s (goal < {GOAL_SECONDS:g} s),"
        f" {size / 1e6:.2f} MB (goal < {GOAL_BYTES / 1e6:g} MB)"
    )
    print(
        f"peer, the text report of the same ledger: {text_s * 1e3:.2f} ms;"
        f" page / text = x{page_s / text_s:.0f}"
    )
    ok = page_s < GOAL_SECONDS and size < GOAL_BYTES
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
