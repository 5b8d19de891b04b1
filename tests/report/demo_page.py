"""The report page of `make demo`'s own run (the real agent, its classifier on the fake GPUs and the toy
trainer), as headless Chromium parsed and painted it, held against what the demo did and when
(``report.phases.json`` beside the page: when it made the job input-bound, fed it again, announced
the reclaim). Called by tests/checkpoint/test_checkpoint_demo.py, which runs the demo once for both;
the picture is kept as bench/out/report-demo.png (docs/report.png is a copy of it)."""

from __future__ import annotations

import shutil
from pathlib import Path

from browser import Elements, chromium, largest
from conftest import REPO

from agent.devtools.demo_input import DEMO_NODE_PRICE as DEMO_PRICE
from agent.devtools.demo_screen import FAST

ARTEFACT = REPO / "bench" / "out" / "report-demo.png"
GPUS = 4
LATE = FAST.window + 10.0  # a verdict turns within the classifier's window (and a loaded box's delay)


def check_demo_page(html: Path, phases: list[tuple[float, str]], tmp: Path) -> None:
    dom = Elements(chromium(tmp, "--dump-dom", html.as_uri()))
    png = tmp / "report-demo.png"
    chromium(tmp, f"--screenshot={png}", html.as_uri())
    ARTEFACT.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(png, ARTEFACT)
    assert png.stat().st_size > 10_000

    # the bands add up to the run: the columns cover the page's period without a gap, and hold the
    # node's GPU-seconds, the same the money table totals
    svg = dom.svg("timeline")
    period = float(svg["data-until"]) - float(svg["data-since"])
    columns = dom.columns()
    assert sum(float(c["data-seconds"]) for c, _ in columns) == approx(period, 0.01), (
        period,
        [(c["data-start"], c["data-seconds"]) for c, _ in columns],
    )
    assert sum(float(c["data-width"]) for c, _ in columns) == approx(float(svg["data-plot-width"]), 0.05)
    banded = sum(float(b["data-gpu-seconds"]) for _, bands in columns for b in bands)
    (total,) = dom.of("total")
    assert banded == approx(float(total["data-gpu-seconds"]), 0.05)
    # the period starts with the first 2-second slot, the first booked tick up to a slot and a tick later
    assert 0 <= GPUS * period - banded <= GPUS * (2.0 + 0.5), (banded, period)

    # the buckets' money adds up to the ledger's total, which is the GPU-seconds at the demo's price
    money = sum(float(r["data-money"]) for r in dom.of("bucket"))
    assert money == approx(float(total["data-money"]), 0.001)
    assert money == approx(banded * DEMO_PRICE / 3600 / GPUS, 0.001)

    # the verdict changes are where the demo changed the job's phase: data/cpu after it made the
    # trainer decode, compute after it fed it again, each within the classifier's window
    (on, _), (off, _) = (p for p in phases if p[1] in ("data/cpu", "compute"))
    verdicts = [(float(m["data-t"]), m["data-label"]) for m in dom.of("mark") if m["data-kind"] == "verdict"]
    data = [t for t, label in verdicts if label == "data/cpu"]
    assert len(data) == 1 and on < data[0] <= on + LATE, (verdicts, phases)
    back = [t for t, label in verdicts if label == "compute" and t > data[0]]
    assert back and off < back[0] <= off + LATE, (verdicts, phases)
    # and the ledger's bands, booked from the GPUs, turn there too: data-cpu while the job decoded
    # (the demo animates its fake GPUs once a second and the agent reads them every 0.5 s: the GPUs
    # starve up to 1.5 s after it made the trainer decode; the phase lasts the window and more)
    during = [largest(b) for c, b in columns if on + 1.5 <= float(c["data-start"]) <= off - 2.0]
    assert during and set(during) == {"data-cpu"}, during
    before = [largest(b) for c, b in columns if float(c["data-start"]) + float(c["data-seconds"]) <= on - 1]
    assert before and before[-1] == "productive", before
    kinds = {m["data-kind"] for m in dom.of("mark")}
    assert {"verdict", "reclaim", "checkpoint"} <= kinds, kinds


def approx(want: float, tolerance: float) -> object:
    import pytest

    return pytest.approx(want, abs=tolerance)
