"""The report's pure pieces: the timeline's bound and its file, the page from data alone (buckets drawn
from whatever the data names, the instance advice last and only where given, nothing unescaped)."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from pathlib import Path

import pytest
import structlog
from browser import Elements

from agent.devtools.report_run import START, play
from agent.ledger.assign import NO_JOB
from agent.report import recorder
from agent.report.data import PageData
from agent.report.gather import UnknownJob, page_data
from agent.report.page import BAND_HEIGHT, MAX_COLUMNS, build_page, columns
from agent.report.timeline import COARSE, COARSE_SECONDS, FINE, GpuPoint, Mark, MarkKind, Point, Timeline

ADVICE = {
    "instance": {"id": "i-0abc", "cloud": "aws", "card": "H100", "gpus": 8, "source": "metadata"},
    "binds": "input <pipeline> & CPU",
    "lines": ["the job waits on its input 20% of the time: more vCPUs per GPU pay off"],
    "candidates": [
        {
            "instance": "p5.48xlarge",
            "cloud": "aws",
            "card": "H100",
            "gpus": 8,
            "step_ratio": [0.95, 1.05],
            "price_ratio": 1.0,
            "cost_per_work_ratio": [0.95, 1.05],
            "excluded": None,
        },
        {
            "instance": "g6e.48xlarge",
            "cloud": "aws",
            "card": "L40S",
            "gpus": 8,
            "step_ratio": [1.8, 2.4],
            "price_ratio": None,
            "cost_per_work_ratio": None,
            "excluded": "no price known",
        },
    ],
    "assumptions": ["step time scales with the card's dense BF16 peak"],
    "job": "4242",
    "made_at": START + 300,
}


def point(t: float, work: float = 0.5, verdict: str | None = "compute") -> Point:
    return Point(t, 1.0, verdict, [GpuPoint(work, 0.9, 10 * 2**30, 80 * 2**30, 0)], [1e6, None, 2e6, None])


def test_the_timeline_keeps_its_bound_and_merges_old_points_into_five_minutes():
    tl = Timeline()
    t0 = 1_700_000_000.0 - 1_700_000_000.0 % COARSE_SECONDS
    week = 7 * 86400
    for i in range(0, week, 7):  # a week of ticks (every 7 s: the merge is the same, the test quicker)
        tl.add(point(t0 + i, work=(i // 3600) % 2))
    assert len(tl.fine) == FINE and len(tl.coarse) <= COARSE
    assert len(tl.fine) + len(tl.coarse) <= FINE + COARSE
    # the coarse points tile the time before the fine ones: one per 5 minutes, spans added up
    spans = [p.span for p in tl.coarse]
    assert max(spans) <= COARSE_SECONDS / 7 + 1 and min(spans) >= 1
    assert sum(spans) + len(tl.fine) == len(range(0, week, 7))
    # the work of alternating hours survives the merge as means: 0 or 1, never mixed within an hour
    hours = {round(p.gpus[0].work or 0.0, 6) for p in tl.coarse}
    assert hours == {0.0, 1.0}


def test_the_saved_text_is_the_whole_timeline_as_points_come_and_go():
    # the file's text keeps each point's text once made: after merges and evictions it must still be
    # exactly the timeline's JSON
    tl = Timeline()
    t0 = 1_700_000_000.0 - 1_700_000_000.0 % COARSE_SECONDS
    tl.mark(Mark(t0, MarkKind.RECLAIM, "spot-termination notice"))
    step = 97  # every 97 s: 3 or 4 points a coarse one, the evicted ones' texts going too
    for i in range(0, (FINE + 4 * COARSE) * step, step):
        tl.add(point(t0 + i, work=(i % 5) / 5))
        if i % (step * 2001) == 0:
            assert json.loads(tl.to_text()) == tl.to_json()
    assert len(tl.coarse) == COARSE
    assert json.loads(tl.to_text()) == tl.to_json()
    assert Timeline.from_json(json.loads(tl.to_text())).to_text() == tl.to_text()


def test_merged_points_keep_the_memory_peak_and_every_clocks_event():
    tl = Timeline()
    t0 = 1_700_000_100.0 - 1_700_000_100.0 % COARSE_SECONDS
    for i in range(FINE + 10):
        p = point(t0 + i)
        p.gpus[0].mem = (70 if i == 3 else 10) * 2**30
        p.gpus[0].clocks = 0x40 if i == 5 else 0
        tl.add(p)
    first = tl.coarse[0]
    assert first.gpus[0].mem == 70 * 2**30 and first.gpus[0].clocks == 0x40


def test_a_damaged_timeline_is_set_aside_and_a_good_one_read_back(tmp_path: Path):
    tl = Timeline()
    for i in range(5):
        tl.add(point(1_700_000_000.0 + i))
    tl.mark(Mark(1_700_000_002.0, MarkKind.VERDICT, "data/cpu", "was compute"))
    recorder.save(tmp_path, json.dumps(tl.to_json()))
    back = recorder.load(tmp_path)
    assert back.to_json() == tl.to_json()
    bad = {"version": 1, "coarse": [], "fine": [[1, -1, None, [], []]], "marks": []}  # a negative span
    (tmp_path / recorder.FILE_NAME).write_text(json.dumps(bad))
    with structlog.testing.capture_logs() as logs:
        empty = recorder.load(tmp_path)
    assert not empty.fine and (tmp_path / f"{recorder.FILE_NAME}.bad").read_text() == json.dumps(bad)
    assert [(e["event"], e["kept_as"]) for e in logs] == [
        (
            "the report timeline damaged; set aside and starting empty",
            str(tmp_path / f"{recorder.FILE_NAME}.bad"),
        )
    ]
    recorder.save(tmp_path, json.dumps(tl.to_json()))  # the next save writes a good one beside it
    assert (tmp_path / recorder.FILE_NAME).stat().st_mode & 0o777 == 0o600
    assert recorder.load(tmp_path).to_json() == tl.to_json()
    assert (tmp_path / f"{recorder.FILE_NAME}.bad").read_text() == json.dumps(bad)


def test_a_bucket_the_page_was_never_told_of_is_drawn_and_listed():
    # a bucket added to the vocabulary later (another engineer's `host-copy`): only the data names it
    buckets = ["productive", "data-cpu", "host-copy"]
    data = PageData(
        node="n1",
        since=1000.0,
        until=1060.0,
        version="t",
        made_at=1060.0,
        buckets=buckets,
        resolution=10.0,
        slots=[(1000.0 + 10 * i, [6.0, 2.0, 2.0 * (i % 2)]) for i in range(6)],
        summary={
            "ratio": 0.6,
            "gpu_seconds": 54.0,
            "buckets": dict(zip(buckets, [36.0, 12.0, 6.0], strict=True)),
            "cost": None,
        },
    )
    page = Elements(build_page(data))
    drawn = {a["data-bucket"] for a in page.of("band")}
    assert drawn == set(buckets)
    assert {a["data-bucket"] for a in page.of("bucket")} == set(buckets)
    heights: dict[str, float] = {}
    for tag, a in page.found:
        if tag == "g" and "col" in a.get("class", ""):
            key = a["data-start"]
        elif tag == "rect" and "band" in a.get("class", ""):
            heights[key] = heights.get(key, 0.0) + float(a["data-height"])
    # each column's bands fill the plot's height
    assert len(heights) == 6 and all(abs(h - BAND_HEIGHT) < 1e-3 for h in heights.values())


def test_a_long_period_is_drawn_in_at_most_max_columns_that_cover_it():
    slots = [(float(60 * i), [60.0, 0.0]) for i in range(10080)]  # a week of 1-minute slots
    data = PageData("n", 0.0, 10080 * 60.0, "t", 0.0, ["a", "b"], 60.0, slots, {})
    cols = columns(data)
    assert len(cols) <= MAX_COLUMNS
    assert sum(c.seconds for c in cols) == 10080 * 60.0
    assert sum(sum(c.gpu_seconds) for c in cols) == 60.0 * 10080


def test_the_instance_advice_is_the_last_section_and_only_where_given(tmp_path: Path):
    played = play(tmp_path)
    without = build_page(played.data())
    assert 'id="advice"' not in without
    page = build_page(played.data(), ADVICE)
    sections = re.findall(r'<section id="([a-z]+)"', page)
    assert sections[-1] == "advice" and sections[0] == "timeline"
    advice = page[page.index('<section id="advice"') :]
    assert "input &lt;pipeline&gt; &amp; CPU" in advice and "<pipeline>" not in page  # escaped
    assert "0.95-1.05" in advice and "1.80-2.40" in advice and "no price known" in advice
    rows = Elements(advice).of("candidate")
    assert [r["data-instance"] for r in rows] == ["p5.48xlarge", "g6e.48xlarge"]
    assert "i-0abc" in advice and "step time scales" in advice and "for job 4242" in advice


def test_a_jobs_page_holds_that_jobs_seconds_and_money(tmp_path: Path):
    played = play(tmp_path)
    node = played.data()
    # the demo-like run has no scheduler: every GPU-second is booked to the ledger's no-job key
    job = page_data(played.ledger, played.recorder.timeline, played.end, played.end - START, "n", "t", NO_JOB)
    assert job.job == NO_JOB and job.summary["gpu_seconds"] == node.summary["gpu_seconds"] > 0
    assert job.summary["cost"]["total"] == node.summary["cost"]["total"] > 0
    assert [s for _, s in job.slots] == [s for _, s in node.slots]
    assert "job no-job" in build_page(job)
    with pytest.raises(UnknownJob, match="no GPU-seconds of job '4242'"):
        page_data(played.ledger, played.recorder.timeline, played.end, 3600.0, "n", "t", "4242")


def test_the_page_fetches_nothing_and_needs_no_script(tmp_path: Path):
    page = build_page(play(tmp_path).data(), ADVICE)
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:)?//""", page)
    assert "@import" not in page and "url(http" not in page


async def test_a_page_asked_again_at_once_is_made_once(tmp_path: Path):
    rec = play(tmp_path).recorder
    first, second = await asyncio.gather(rec.page(3600.0), rec.page(3600.0))
    assert first is second  # the second waited for the first and was served it
    assert await rec.page(3600.0, network=True) is not first  # another question, another page
    with pytest.raises(ValueError, match="since must be between"):
        await rec.page(float("nan"))


def test_a_slot_no_tick_fell_in_leaves_no_gap_in_the_timeline():
    """An agent stalled past a 1 s slot books the stall in the next tick's slot: the column reaches
    back to the one before it (a loaded box's demo page had columns 1 s short of its period)."""
    starts = [0.0, 1.0, 2.0, 4.0, 5.0, 8.0, 9.0]  # no tick in 3-4 s and 6-8 s
    covers = {4.0: 2.0, 8.0: 3.0}  # the tick after a stall books the stall too
    slots = [(s, [4.0 * covers.get(s, 1.0), 0.0]) for s in starts]
    data = PageData("n", 0.0, 10.0, "t", 0.0, ["a", "b"], 1.0, slots, {})
    cols = columns(data)
    assert sum(c.seconds for c in cols) == 10.0
    assert all(a.start + a.seconds == b.start for a, b in itertools.pairwise(cols))
    # the GPU-seconds of a column against its seconds: the 4 GPUs of the node, every column
    assert [sum(c.gpu_seconds) / c.seconds for c in cols] == [4.0] * len(starts)
    # a page made 0.16 s after the last slot ended: its last column reaches on to the period's end
    later = columns(PageData("n", 0.0, 10.16, "t", 0.0, ["a", "b"], 1.0, slots, {}))
    assert sum(c.seconds for c in later) == pytest.approx(10.16) and later[-1].seconds == pytest.approx(1.16)
