"""/sys/class/infiniband/<dev>/ports/<n>/: data counters, link rate and congestion counters.

The IB performance counters ``port_rcv_data``/``port_xmit_data`` count 4-byte words. Where the HCA
lacks the extended (64-bit) counter set the kernel shows the 32-bit ones, which saturate at
2^32-1 instead of wrapping (a few seconds of 100 Gb/s); mlx4 then offers ``counters_ext/*_64``.
Those are preferred when present. mlx5 and later show 64-bit values under the plain names.
Alibaba eRDMA has no ``counters`` folder at all; its ``hw_counters`` hold byte counts
(``tx_bytes_cnt``/``rx_bytes_cnt``, ``hw_``-prefixed on older drivers).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from agent.sources.host.parse import Parsed
from agent.sources.network.part import RdmaPort

WORD_BYTES = 4
_RATE = re.compile(r"^\s*(\d{1,9}(?:\.\d{1,9})?)\s*([GMT])b/sec\b")
_RATE_UNIT = {"M": 1e6, "G": 1e9, "T": 1e12}

# names this agent reads, in order of preference: (folder/file, multiplier)
RX_SOURCES = (
    ("counters_ext/port_rcv_data_64", WORD_BYTES),
    ("counters/port_rcv_data_64", WORD_BYTES),
    ("counters/port_rcv_data", WORD_BYTES),
    ("hw_counters/rx_bytes_cnt", 1),
    ("hw_counters/hw_rx_bytes_cnt", 1),
)
TX_SOURCES = (
    ("counters_ext/port_xmit_data_64", WORD_BYTES),
    ("counters/port_xmit_data_64", WORD_BYTES),
    ("counters/port_xmit_data", WORD_BYTES),
    ("hw_counters/tx_bytes_cnt", 1),
    ("hw_counters/hw_tx_bytes_cnt", 1),
)
XMIT_WAIT = "counters/port_xmit_wait"
CNP_SENT = "hw_counters/np_cnp_sent"
CNP_HANDLED = "hw_counters/rp_cnp_handled"
OUT_OF_BUFFER = "hw_counters/out_of_buffer"
WANTED = frozenset(
    [name for name, _ in RX_SOURCES + TX_SOURCES] + [XMIT_WAIT, CNP_SENT, CNP_HANDLED, OUT_OF_BUFFER]
)


def parse_counter(text: str) -> Parsed[int | None]:
    """One counter file. ``N/A (no PMA)`` (iWARP devices without a performance agent) is ``None``."""
    s = text.strip()
    if s.startswith("N/A"):
        return Parsed(None, 0)
    try:
        v = int(s)
    except ValueError:
        return Parsed(None, 1)
    return Parsed(v, 0) if v >= 0 else Parsed(None, 1)


def parse_rate(text: str) -> Parsed[int | None]:
    """``"100 Gb/sec (4X EDR)"`` -> 12_500_000_000 bytes/s."""
    m = _RATE.match(text)
    if m is None:
        return Parsed(None, 1 if text.strip() else 0)
    return Parsed(int(float(m.group(1)) * _RATE_UNIT[m.group(2)] / 8), 0)


def build_port(device: str, port: int, files: Mapping[str, str], rate: str | None) -> Parsed[RdmaPort]:
    """An :class:`RdmaPort` from the texts of the files in :data:`WANTED` that exist (keyed
    ``folder/name``) and of ``rate``. A missing file is ``None``; an unparsable one is counted."""
    bad = 0
    values: dict[str, int | None] = {}
    for name, text in files.items():
        if name in WANTED:
            p = parse_counter(text)
            values[name] = p.value
            bad += p.malformed

    def first(sources: tuple[tuple[str, int], ...]) -> int | None:
        for name, scale in sources:
            v = values.get(name)
            if v is not None:
                return v * scale
        return None

    rate_bytes = None
    if rate is not None:
        r = parse_rate(rate)
        rate_bytes, bad = r.value, bad + r.malformed
    return Parsed(
        RdmaPort(
            device=device,
            port=port,
            rx_bytes=first(RX_SOURCES),
            tx_bytes=first(TX_SOURCES),
            rate_bytes=rate_bytes,
            xmit_wait=values.get(XMIT_WAIT),
            cnp_sent=values.get(CNP_SENT),
            cnp_handled=values.get(CNP_HANDLED),
            out_of_buffer=values.get(OUT_OF_BUFFER),
        ),
        bad,
    )
