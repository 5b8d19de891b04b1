"""Host parsers on real kernel text, checked against node_exporter's output for the same files."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from agent.sources.host.collector import HostCollector
from agent.sources.host.parse import (
    parse_loadavg,
    parse_meminfo,
    parse_pressure,
    parse_stat,
    pressure_by_line,
)


def _oracle(kernel_fixtures) -> dict[str, list]:
    text = (kernel_fixtures / "node_exporter" / "e2e-output-subset.txt").read_text()
    out: dict[str, list] = defaultdict(list)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name].append(s)
    return out


def test_host_collector_agrees_with_node_exporter(kernel_fixtures):
    oracle = _oracle(kernel_fixtures)
    part = HostCollector(str(kernel_fixtures / "node_exporter" / "proc")).collect()
    assert part.memory_total_bytes == oracle["node_memory_MemTotal_bytes"][0].value
    for res in ("cpu", "io", "memory"):
        waiting = oracle[f"node_pressure_{res}_waiting_seconds_total"][0].value
        assert abs(part.pressure[res].some_total_seconds - waiting) < 1e-9
    assert (
        abs(
            part.pressure["io"].full_total_seconds - oracle["node_pressure_io_stalled_seconds_total"][0].value
        )
        < 1e-9
    )
    cpus = {s.labels["cpu"] for s in oracle["node_cpu_seconds_total"]}
    assert part.cpu_count == len(cpus)
    # the kernel's aggregate line is the sum of the per-CPU lines node_exporter reports
    for mode in ("idle", "iowait", "system", "softirq"):
        total = sum(s.value for s in oracle["node_cpu_seconds_total"] if s.labels["mode"] == mode)
        assert abs(getattr(part.cpu, mode) - total) <= 0.02 * max(1.0, total), mode
    assert part.malformed_lines == 0


def test_procfs_fixture_tree_parses(kernel_fixtures):
    part = HostCollector(str(kernel_fixtures / "procfs" / "proc")).collect()
    assert part.cpu is not None and part.cpu.total > 0
    assert part.pressure.get("cpu") is not None
    assert part.pressure["cpu"].full_avg10 is None or part.pressure["cpu"].full_avg10 >= 0


def test_synthetic_host_tree(tmp_path):
    (tmp_path / "pressure").mkdir()
    (tmp_path / "stat").write_text(
        "cpu  100 0 50 800 40 0 10 0 0 0\ncpu0 50 0 25 400 20 0 5 0 0 0\ncpu1 50 0 25 400 20 0 5 0 0 0\n"
        "cpuX garbage\nintr 1 2 3\n"
    )
    (tmp_path / "loadavg").write_text("1.50 0.75 0.25 2/300 12345\n")
    (tmp_path / "meminfo").write_text(
        "MemTotal:       1000 kB\nMemAvailable:    500 kB\nHugePages_Total: 4\nbad line\n"
    )
    (tmp_path / "pressure" / "io").write_text(
        "some avg10=1.50 avg60=1.00 avg300=0.50 total=2000000\n"
        "full avg10=0.50 avg60=0.25 avg300=0.10 total=1000000\n"
    )
    part = HostCollector(str(tmp_path)).collect()
    assert part.cpu.user == 1.0 and part.cpu.idle == 8.0 and part.cpu.iowait == 0.4
    assert part.cpu_count == 2
    assert (part.load1, part.load5, part.load15) == (1.5, 0.75, 0.25)
    assert part.memory_total_bytes == 1024000 and part.memory_available_bytes == 512000
    assert part.pressure["io"].some_total_seconds == 2.0 and part.pressure["io"].full_avg10 == 0.5
    assert "cpu" not in part.pressure  # absent file: no pressure, no failure
    assert part.malformed_lines == 1  # "cpuX garbage"; meminfo's "bad line" is not a line it reads
    (tmp_path / "meminfo").write_text("MemTotal:       1000 kB\nMemAvailable:    lots kB\nbad line\n")
    part = HostCollector(str(tmp_path)).collect()
    assert part.memory_total_bytes == 1024000 and part.memory_available_bytes is None
    assert part.malformed_lines == 2  # "cpuX garbage" and the MemAvailable it could not read


def test_meminfo_units():
    parsed = parse_meminfo("MemTotal: 2 kB\nHugePages_Free: 3\n", ("MemTotal", "HugePages_Free", "Absent"))
    assert parsed.value == {"MemTotal": 2048, "HugePages_Free": 3}
    assert parsed.malformed == 0


def meminfo_by_line(text: str, keys: tuple[str, ...]) -> dict[str, int]:
    """The named keys of every line read in turn, the last of a key written twice winning."""
    out = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and key in keys and parts and parts[0].isascii() and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return out


meminfo_line = st.one_of(
    st.tuples(
        st.sampled_from(["MemTotal", "MemAvailable", "MemFree", "Cached"]),
        st.integers(0, 2**40),
        st.sampled_from([" kB", ""]),
        st.sampled_from([" ", "       ", "\t"]),
    ).map(lambda t: f"{t[0]}:{t[3]}{t[1]}{t[2]}"),
    st.text(alphabet="MemTotalAvb: kB0123456789x", max_size=30),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(meminfo_line, max_size=12))
def test_meminfo_reads_the_keys_it_is_asked_as_every_line_read_in_turn(lines):
    text = "\n".join(lines) + "\n"
    keys = ("MemTotal", "MemAvailable")
    assert parse_meminfo(text, keys).value == meminfo_by_line(text, keys)


def test_meminfo_of_a_real_kernel(kernel_fixtures):
    text = (kernel_fixtures / "node_exporter" / "proc" / "meminfo").read_text()
    keys = ("MemTotal", "MemFree", "MemAvailable", "Hugepagesize", "HugePages_Total")
    parsed = parse_meminfo(text, keys)
    assert parsed.value == meminfo_by_line(text, keys) and parsed.malformed == 0
    assert set(parsed.value) <= set(keys) and "MemTotal" in parsed.value


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_host_parsers_never_raise(text):
    cpu, count = parse_stat(text).value
    assert count >= 0
    assert cpu is None or cpu.total >= 0
    parse_loadavg(text)
    assert parse_meminfo(text).malformed >= 0
    p = parse_pressure(text)
    assert p is None or p.some_total_seconds == p.some_total_seconds
    assert p == pressure_by_line(text)


psi_value = st.sampled_from(["0.00", "1.50", "12.34", "100.00", "1.5.0", "x"])
psi_total = st.sampled_from(["0", "123456", "x"])
psi_fields = st.tuples(st.sampled_from(["some", "full", "half"]), psi_value, psi_value, psi_value, psi_total)
psi_line = psi_fields.map(lambda t: f"{t[0]} avg10={t[1]} avg60={t[2]} avg300={t[3]} total={t[4]}")


@settings(max_examples=300, deadline=None)
@given(st.lists(psi_line, max_size=4), st.sampled_from(["\n", ""]))
def test_pressure_in_the_kernels_layout_reads_as_line_by_line(lines, end):
    text = "\n".join(lines) + end
    assert parse_pressure(text) == pressure_by_line(text)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=4000))
def test_host_parsers_on_garbled_bytes(data):
    text = data.decode("utf-8", "replace")
    parse_stat("cpu " + text)
    parse_meminfo("MemTotal: " + text)
    parse_pressure("some avg10=" + text)


def test_truncated_real_files(kernel_fixtures):
    stat = (kernel_fixtures / "node_exporter" / "proc" / "stat").read_text()
    for cut in range(0, len(stat), max(1, len(stat) // 50)):
        parse_stat(stat[:cut])
    pressure = (kernel_fixtures / "node_exporter" / "proc" / "pressure" / "io").read_text()
    for cut in range(len(pressure)):
        parse_pressure(pressure[:cut])
