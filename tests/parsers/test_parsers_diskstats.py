"""/proc/diskstats on real kernel text (both fixture trees) and on every field-count variant."""

from __future__ import annotations

from agent.sources.storage.diskstats import parse_diskstats


def _lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_real_diskstats_every_line_parses(kernel_fixtures):
    for tree in ("node_exporter", "procfs"):
        text = (kernel_fixtures / tree / "proc" / "diskstats").read_text()
        parsed = parse_diskstats(text)
        assert parsed.malformed == 0, tree
        rows = _lines(text)
        assert [d.device for d in parsed.value] == [r[2] for r in rows]
        # the three kernel shapes are all in these files
        assert {len(r) for r in rows} == {14, 18, 20}
        for d, r in zip(parsed.value, rows, strict=True):
            assert d.reads_completed == int(r[3])
            assert d.read_bytes == int(r[5]) * 512
            assert d.read_time_seconds == int(r[6]) / 1000
            assert d.sectors_written == int(r[9])
            assert d.io_time_seconds == int(r[12]) / 1000


def test_known_values_from_node_exporter_tree(kernel_fixtures):
    text = (kernel_fixtures / "node_exporter" / "proc" / "diskstats").read_text()
    by_dev = {d.device: d for d in parse_diskstats(text).value}
    # 14, 18 and 20 fields respectively; node_exporter reports these same numbers
    assert by_dev["sda"].read_bytes == 513713216512
    assert by_dev["sdb"].read_bytes == 4944782848
    assert by_dev["sdc"].read_bytes == 848782848
    assert by_dev["sdc"].io_time_seconds == 10.73
    assert by_dev["vda"].read_time_seconds == 8655.768


def test_field_count_variants_and_malformed_lines():
    base = "8 0 sda 10 1 200 30 4 5 600 70 0 80 90"
    text = "\n".join(
        [
            base,  # 14 fields (before 4.18)
            base.replace("sda", "sdb") + " 1 2 3 4",  # 18 (discards)
            base.replace("sda", "sdc") + " 1 2 3 4 5 6",  # 20 (flushes)
            "8 1 sda1 10 200 4 600",  # 2.6-era partition line: 7 fields
            "8 0 sdd 10 x 200 30 4 5 600 70 0 80 90",  # not a number
            "8 0 sde -10 1 200 30 4 5 600 70 0 80 90",  # negative counter
            "",
            "   ",
        ]
    )
    parsed = parse_diskstats(text)
    assert [d.device for d in parsed.value] == ["sda", "sdb", "sdc"]
    assert parsed.malformed == 3
    for d in parsed.value:
        assert (d.reads_completed, d.reads_merged, d.sectors_read) == (10, 1, 200)
        assert d.read_bytes == 200 * 512
        assert d.read_time_seconds == 0.03
        assert (d.writes_completed, d.sectors_written, d.write_time_seconds) == (4, 600, 0.07)
        assert (d.io_in_progress, d.io_time_seconds) == (0, 0.08)


def test_empty_input():
    parsed = parse_diskstats("")
    assert parsed.value == [] and parsed.malformed == 0
