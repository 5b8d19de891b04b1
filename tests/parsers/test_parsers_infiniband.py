"""RDMA port files: counters (4-byte words, 64-bit variants), rate, mlx5 and eRDMA hw_counters."""

from __future__ import annotations

from pathlib import Path

from agent.sources.network.infiniband import WANTED, build_port, parse_counter, parse_rate


def _port_files(port_dir: Path) -> dict[str, str]:
    return {
        f"{p.parent.name}/{p.name}": p.read_text()
        for p in port_dir.glob("*/*")
        if f"{p.parent.name}/{p.name}" in WANTED
    }


def test_rate():
    assert parse_rate("100 Gb/sec (4X EDR)\n").value == 12_500_000_000
    assert parse_rate("40 Gb/sec (4X QDR)").value == 5_000_000_000
    assert parse_rate("10 Gb/sec (4X)").value == 1_250_000_000
    assert parse_rate("2.5 Gb/sec (1X SDR)").value == 312_500_000
    assert parse_rate("53.125 Gb/sec (1X HDR)").value == 6_640_625_000
    for bad in ("fast", "Gb/sec", "1e999 Gb/sec", "9" * 40 + " Gb/sec"):
        p = parse_rate(bad)
        assert p.value is None and p.malformed == 1
    assert parse_rate("").malformed == 0


def test_counter():
    assert parse_counter("4631917\n").value == 4631917
    p = parse_counter("N/A (no PMA)\n")  # iWARP devices (i40iw) without a performance agent
    assert p.value is None and p.malformed == 0
    for bad in ("", "x", "-1"):
        p = parse_counter(bad)
        assert p.value is None and p.malformed == 1


def test_mlx4_prefers_64_bit_counters(kernel_fixtures):
    ports = kernel_fixtures / "node_exporter" / "sys" / "class" / "infiniband" / "mlx4_0" / "ports"
    for n in (1, 2):
        pdir = ports / str(n)
        files = _port_files(pdir)
        assert "counters_ext/port_rcv_data_64" in files
        port = build_port("mlx4_0", n, files, (pdir / "rate").read_text())
        assert port.malformed == 0
        words_rx = int(files["counters_ext/port_rcv_data_64"])
        words_tx = int(files["counters_ext/port_xmit_data_64"])
        assert (port.value.rx_bytes, port.value.tx_bytes) == (words_rx * 4, words_tx * 4)
        assert port.value.rate_bytes == 5_000_000_000
    # port 2's 32-bit counters read 0 while the 64-bit ones do not: the 64-bit ones win
    assert int((ports / "2" / "counters" / "port_rcv_data").read_text()) == 0


def test_mlx5_and_hfi1_plain_counters(kernel_fixtures):
    ib = kernel_fixtures / "procfs" / "sys" / "class" / "infiniband"
    pdir = ib / "mlx5_0" / "ports" / "1"
    port = build_port("mlx5_0", 1, _port_files(pdir), (pdir / "rate").read_text())
    assert port.malformed == 0
    assert port.value.rx_bytes == 18126345378 * 4
    assert port.value.tx_bytes == 2880761508848 * 4
    assert port.value.rate_bytes == 3_125_000_000  # "25 Gb/sec (1X EDR)"
    assert port.value.out_of_buffer == 0
    assert port.value.xmit_wait == 0
    # this older mlx5 firmware has no congestion counters: None, not 0
    assert port.value.cnp_sent is None and port.value.cnp_handled is None
    pdir = ib / "hfi1_0" / "ports" / "1"
    port = build_port("hfi1_0", 1, _port_files(pdir), (pdir / "rate").read_text())
    assert port.value.rate_bytes == 12_500_000_000


def test_iwarp_without_pma(kernel_fixtures):
    pdir = kernel_fixtures / "node_exporter" / "sys" / "class" / "infiniband" / "i40iw0" / "ports" / "1"
    port = build_port("i40iw0", 1, _port_files(pdir), (pdir / "rate").read_text())
    assert port.malformed == 0
    assert port.value.rx_bytes is None and port.value.tx_bytes is None
    assert port.value.rate_bytes == 1_250_000_000


def test_congestion_counters_and_erdma_bytes():
    mlx5 = {
        "counters/port_rcv_data": "100",
        "counters/port_xmit_data": "200",
        "counters/port_xmit_wait": "7",
        "hw_counters/np_cnp_sent": "11",
        "hw_counters/rp_cnp_handled": "12",
        "hw_counters/out_of_buffer": "13",
        "hw_counters/rx_write_requests": "999",  # not read
    }
    p = build_port("mlx5_0", 1, mlx5, "200 Gb/sec (4X HDR)").value
    assert (p.rx_bytes, p.tx_bytes, p.xmit_wait) == (400, 800, 7)
    assert (p.cnp_sent, p.cnp_handled, p.out_of_buffer) == (11, 12, 13)
    # eRDMA: no counters folder; byte counters already in bytes, with or without the hw_ prefix
    for prefix in ("", "hw_"):
        files = {f"hw_counters/{prefix}rx_bytes_cnt": "5000", f"hw_counters/{prefix}tx_bytes_cnt": "6000"}
        p = build_port("erdma_0", 1, files, None).value
        assert (p.rx_bytes, p.tx_bytes, p.rate_bytes, p.xmit_wait) == (5000, 6000, None, None)


def test_garbled_counter_is_counted_and_none():
    files = {"counters/port_rcv_data": "garbage", "counters/port_xmit_data": "3"}
    p = build_port("mlx5_0", 1, files, "what")
    assert p.malformed == 2
    assert p.value.rx_bytes is None and p.value.tx_bytes == 12 and p.value.rate_bytes is None
