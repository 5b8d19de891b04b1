"""The report page of a demo-like run (agent/devtools/report_run.py: the ledger and report parts fed
the demo's story) rendered by a real browser, headless Chromium: what it parsed (``--dump-dom``) and
what it painted (``--screenshot``, read back with Pillow) against the ledger's own figures.

The screenshot is kept as a build artefact, bench/out/report-run.png; the page of `make demo`'s own
run is checked and kept beside it by tests/checkpoint/test_checkpoint_demo.py (demo_page.py).
"""

from __future__ import annotations

import itertools
import shutil

import pytest
from browser import WINDOW, Elements, chromium, largest
from conftest import REPO
from PIL import Image

from agent.devtools.report_run import GPUS, START, Played, play
from agent.report.page import BAND_HEIGHT, WIDTH, build_page

ARTEFACT = REPO / "bench" / "out" / "report-run.png"
PRODUCTIVE_RGB = (0x00, 0x9E, 0x73)  # the palette's first colour, drawn solid (svg.py)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> tuple[Played, Elements, Image.Image]:
    tmp = tmp_path_factory.mktemp("report")
    played = play(tmp / "state")
    page = tmp / "report.html"
    page.write_text(build_page(played.data()))
    dom = chromium(tmp, "--dump-dom", page.as_uri())
    png = tmp / "report.png"
    chromium(tmp, f"--screenshot={png}", page.as_uri())
    ARTEFACT.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(png, ARTEFACT)
    return played, Elements(dom), Image.open(png).convert("RGB")


def test_the_bands_add_up_to_the_run(rendered):
    played, dom, _ = rendered
    run = played.end - START
    cols = dom.of("col")
    assert len(cols) == run / played.ledger.cfg.resolution
    assert sum(float(c["data-seconds"]) for c in cols) == pytest.approx(run)
    # the columns tile the plot's width: no gap, no overlap, in time order
    xs = [(float(c["data-x"]), float(c["data-width"])) for c in cols]
    assert sum(w for _, w in xs) == pytest.approx(WIDTH, abs=1e-3 * len(xs))  # 3 decimals each
    assert all(abs(a + wa - b) < 2e-3 for (a, wa), (b, _) in itertools.pairwise(xs))
    # each column's bands fill its height, and hold its GPU-seconds: the node's GPUs for its length
    for col, (_, attrs) in zip(cols, dom.columns(), strict=True):
        assert sum(float(a["data-height"]) for a in attrs) == pytest.approx(BAND_HEIGHT)
        held = sum(float(a["data-gpu-seconds"]) for a in attrs)
        assert held == pytest.approx(GPUS * float(col["data-seconds"]))


def test_the_buckets_money_adds_up_to_the_ledgers_total(rendered):
    played, dom, _ = rendered
    seconds, cost = played.ledger.ledger.book.everything()
    rows = dom.of("bucket")
    assert [r["data-bucket"] for r in rows] == [str(b) for b in played.data().buckets]
    assert sum(float(r["data-money"]) for r in rows) == pytest.approx(sum(cost), abs=1e-3)
    assert sum(float(r["data-gpu-seconds"]) for r in rows) == pytest.approx(sum(seconds), abs=1e-2)
    (total,) = dom.of("total")
    assert float(total["data-money"]) == pytest.approx(sum(cost), abs=1e-3)
    # the bands over time hold the same GPU-seconds as the table
    bands = [a for _, attrs in dom.columns() for a in attrs]
    assert sum(float(a["data-gpu-seconds"]) for a in bands) == pytest.approx(sum(seconds), abs=1e-2)


def test_the_verdict_changes_are_where_the_run_changed_phase(rendered):
    played, dom, _ = rendered
    changes = [(t, phase) for t, phase in played.phases if phase != "reclaim"]
    marks = [m for m in dom.of("mark") if m["data-kind"] == "verdict"]
    # the first snapshot after each change of phase carries it (a tick a second)
    assert [(float(m["data-t"]), m["data-label"]) for m in marks] == [(t + 1, p) for t, p in changes]
    # and the ledger's bands, booked from the GPUs' readings, change there too
    columns = dom.columns()
    for m in marks[1:]:
        t = float(m["data-t"])
        before = largest([a for c, a in columns if float(c["data-start"]) + 5 <= t - 1][-1])
        after = largest(next(a for c, a in columns if float(c["data-start"]) >= t))
        want = ("productive", "data-cpu") if m["data-label"] == "data/cpu" else ("data-cpu", "productive")
        assert (before, after) == want
    kinds = {m["data-kind"] for m in dom.of("mark")}
    assert kinds == {"verdict", "checkpoint", "reclaim", "gpu-fault"}


def test_the_painted_picture_matches_the_page(rendered):
    played, dom, img = rendered
    assert img.size[0] == WINDOW[0]
    px = img.load()
    width, height = img.size
    # the rows of the timeline: where the productive band spans most of the plot
    rows = [
        y
        for y in range(height)
        if sum(px[x, y] == PRODUCTIVE_RGB for x in range(0, width, 2)) * 2 > WIDTH / 2
    ]
    assert rows, "no productive band painted"
    assert rows[-1] - rows[0] + 1 <= BAND_HEIGHT + 1
    painted = [(x, y) for y in rows for x in range(width) if px[x, y] == PRODUCTIVE_RGB]
    left = min(x for x, _ in painted)
    # its area is what the page says it is: each column's productive band, height by width
    area = 0.0
    for col, attrs in dom.columns():
        for a in attrs:
            if a["data-bucket"] == "productive":
                area += float(a["data-height"]) * float(col["data-width"])
    assert len(painted) == pytest.approx(area, rel=0.03)
    # the verdict marks are drawn where their time falls on the axis (a dark line through the bands)
    mid = rows[len(rows) // 2]
    for m in (m for m in dom.of("mark") if m["data-kind"] == "verdict"):
        x = left + (float(m["data-t"]) - START) / (played.end - START) * WIDTH
        darkest = min(sum(px[int(x) + dx, mid]) for dx in (-1, 0, 1))
        assert darkest < 3 * 90, f"no line at x={x:.0f} for {m['data-label']}"
    assert ARTEFACT.stat().st_size > 10_000
