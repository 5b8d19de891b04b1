"""The ``top`` screen as a pure function: random nodes (1-8 GPUs, any number of disks, mounts, NICs and
RDMA ports, a notice, a drill, goodput) laid out at many sizes. Sizes and nodes come from seeds; the
three sizes of the issue are always among them."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.classifier.baselines import Baselines
from agent.classifier.gpus import GpuClass, gpu_class
from agent.classifier.samples import EMPTY, GpuSample, Sample
from agent.cli.toppanels import HISTORY, History
from agent.cli.topparts import View, sparkline
from agent.cli.topview import screen, spinning
from agent.config.classifier import ClassifierSection

CFG = ClassifierSection()
NOW = 1_800_000_000.0
SIZES = [(80, 24), (120, 40), (200, 50)]
ROW = re.compile(r"^\s*(\d+) (util|LOST)")


def gpu(rng: random.Random, i: int, spin: bool) -> dict[str, Any]:
    util = rng.uniform(0.9, 1.0) if spin else rng.random()
    return {
        "index": i,
        "uuid": f"GPU-{i}",
        "model": "NVIDIA H100 80GB HBM3",
        "up": rng.random() > 0.05,
        "pci_bus_id": f"00000000:{i:02X}:00.0",
        "utilization_ratio": util,
        "memory_used_bytes": rng.randrange(80) * 2**30,
        "memory_total_bytes": 80 * 2**30,
        "power_watts": rng.uniform(60, 700),
        "power_limit_watts": 700.0,
        "temperature_celsius": rng.uniform(30, 90),
        "sm_active_ratio": rng.uniform(0, 0.05) if spin else rng.choice([None, rng.random()]),
        "tensor_active_ratio": rng.choice([None, rng.random()]),
        "dram_active_ratio": rng.random(),
        "sm_clock_hertz": 1.98e9,
        "clocks_event_reasons": rng.choice([0, 0x4, 0x40, 0x4 | 0x8]),
        "ecc_uncorrected_total": rng.choice([0, 2]),
        "pcie_rx_bytes_per_second": rng.random() * 1e10,
        "pcie_tx_bytes_per_second": None,
        "processes": [{"pid": 4000 + i, "used_memory_bytes": 2**34}] if rng.random() < 0.7 else [],
        "xid_counts": {"79": 1} if rng.random() < 0.1 else {},
    }


def status(seed: int, notice: bool = True, drill: bool = False, goodput: bool = True) -> dict[str, Any]:
    rng = random.Random(seed)
    n = rng.randint(1, 8)
    deadline = datetime.fromtimestamp(NOW, UTC) + timedelta(seconds=rng.uniform(30, 300))
    names = [f"/mnt/dataset-{i}-very-long-mount-name" if i % 3 == 0 else f"/data{i}" for i in range(5)]
    snap: dict[str, Any] = {
        "seq": seed,
        "gpus": [gpu(rng, i, spin=rng.random() < 0.5) for i in range(n)],
        "driver_version": "550.90.07",
        "disks": {
            f"nvme{i}n1": {"read_bytes_per_second": rng.random() * 3e9} for i in range(rng.randint(0, 12))
        },
        "nfs": {
            m: {"read_bytes_per_second": rng.random() * 1e9, "read_rtt_seconds": rng.random() * 0.05}
            for m in names[: rng.randint(0, 5)]
        },
        "nics": {
            f"eth{i}": {
                "rx_bytes_per_second": rng.random() * 1e9,
                "tx_bytes_per_second": rng.random() * 1e9,
                "speed_bytes": 12.5e9,
            }
            for i in range(rng.randint(0, 6))
        },
        "rdma": {
            f"mlx5_{i}/1": {
                "rx_bytes_per_second": rng.random() * 2e10,
                "tx_bytes_per_second": 0.0,
                "rate_bytes": 5e10,
            }
            for i in range(rng.randint(0, 8))
        },
        "training_processes": [
            {
                "pid": 4000 + i,
                "comm": "python",
                "cpu_cores": rng.uniform(0, 8),
                "allowed_cores": 8.0,
                "descendants": 6,
            }
            for i in range(rng.randint(0, 8))
        ],
    }
    event = "alibaba-spot-1"
    st_: dict[str, Any] = {
        "version": "0.1.0",
        "uptime_seconds": 3723.0,
        "healthy": rng.random() > 0.1,
        "health_reason": "sampler stalled",
        "snapshot": snap,
        "classifier": {
            "verdict": rng.choice(["compute", "data", "network", "sync-wait", "idle", None]),
            "sub_reason": rng.choice([None, "storage"]),
            "since_seconds": 135.0,
            "reasons": [
                "SM active 23% while GPU utilization reads 97%: kernels wait for input " * 2,
                "NFS reads",
            ],
            "hint": "Stage the dataset on local NVMe, or raise DataLoader num_workers and prefetch_factor.",
            "health": rng.choice([[], ["GPU 1: Xid 79 (fallen off the bus)"]]),
            "scores": {"compute": 0.1, "data": 0.8, "network": 0.1},
            "vote": "data",
            "held": rng.choice([None, "warming up"]),
            "candidate": rng.choice([None, "network"]),
            "candidate_count": 1,
            "window_samples": 30,
            "learned": Baselines(
                peaks={"disk": {"nvme0n1": 3e9}, "nfs": {}, "nic": {}, "rdma": {}}
            ).to_json(),
        },
        "gpu-health": {"lines": rng.choice([[], ["GPU 3: thermal throttling"]])},
        "preemption": {
            "provider": "alibaba",
            "enabled": True,
            "selected_by": "config",
            "sources": {},
            "active": [{"event_id": event, "kind": "spot-termination", "deadline": deadline.isoformat()}]
            if notice
            else [],
        },
        "checkpoint": {
            "signal": "SIGUSR1",
            "dry_run": False,
            "targets": [{"pid": 4000, "comm": "python", "handler": rng.choice(["handler", "no-handler"])}],
            "request_file": "/run/training-node-agent/checkpoint/request.json",
            "active": [
                {
                    "event_id": event if notice else "drill-1",
                    "kind": "spot-termination",
                    "phase": "requested",
                    "drill": drill,
                    "deadline": deadline.isoformat(),
                    "line": "requested 3 s ago, waiting for the ack, 250 s left",
                    "targets": ["pid 4000 (python): signalled"],
                }
            ]
            if notice or drill
            else [],
            "recent": [
                {"kind": "spot-termination", "drill": True, "line": "completed in 2.1 s, 297 s before"}
            ],
        },
    }
    if goodput:  # the shape agent.ledger's status has
        st_["goodput"] = {
            "since": "2026-12-01T07:00:00Z",
            "window_seconds": 3600.0,
            "ratio": 0.873,
            "gpu_seconds": 3600.0,
            "buckets": {"productive": 3143.0, "data-storage": 300.0, "checkpoint": 157.0, "idle": 0.0},
            "cost": {"currency": "USD", "total": 12.5, "wasted": 1.59},
            "cadence": {"interval_seconds": 600},
            "lines": [
                "goodput 87.3% over 1 h (1.00 GPU-h)",
                "  productive 87%, data-storage 8%, checkpoint 4%",
                "cost 12.50 USD, wasted 1.59",
                "cadence: checkpoint every 10 min",
            ],
        }
        st_["advice"] = {  # the shape agent.advice's status has: its one line
            "advice": {"binds": "input", "lines": ["fix the input first"]},
            "lines": ["advice: fix the input first: on any card the data wait stays 40% of each step"],
        }
    return st_


def sizes(seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [*SIZES, *((rng.randint(80, 240), rng.randint(24, 70)) for _ in range(3))]


def text(lines: list[Any]) -> str:
    return "\n".join(t.plain for t in lines)


@pytest.mark.parametrize("seed", range(40))
def test_every_frame_fits_and_keeps_what_matters(seed: int) -> None:
    st_ = status(seed, notice=seed % 2 == 0, drill=seed % 4 == 1, goodput=seed % 3 != 0)
    n_gpus = len(st_["snapshot"]["gpus"])
    for detail in (False, True):
        for width, height in sizes(seed):
            lines = screen(st_, History(), CFG, View(width, height, NOW, detail=detail))
            out = text(lines)
            where = f"seed {seed} {width}x{height} detail={detail}\n{out}"
            assert len(lines) <= height, where
            assert all(t.cell_len <= width for t in lines), where
            assert lines[0].plain.startswith("training-node-agent top"), where
            first = lines[1].plain
            assert "BOUND" in first or "SYNC-WAIT" in first or "IDLE" in first or "pending" in first, where
            assert "GPU health" in first, where
            # every GPU has its row on every size (the detail lines give way first)
            rows = [int(m.group(1)) for t in lines if (m := ROW.match(t.plain))]
            if not detail or height >= 2 * n_gpus + 8:
                assert rows == list(range(n_gpus)), where
            if st_["preemption"]["active"]:
                assert re.search(r"NOTICE spot-termination\s+\d\d:\d\d left", out), where
            elif st_["checkpoint"]["active"]:
                assert "DRILL" in out and "a drill: no real notice" in out and "NOTICE" not in out, where
            gpu_lines = 2 * n_gpus if detail else n_gpus
            if (st_["preemption"]["active"] or st_["checkpoint"]["active"]) and height >= gpu_lines + 10:
                # the trainer's side of the handshake stays on screen, however many inputs there are
                assert re.search(r"checkpoint SIGUSR1  pid 4000 (handler ready|no-handler)", out), where
            if st_["classifier"]["candidate"] and height >= 30:
                assert "pending: network 1/3 confirmations" in out, where


def test_a_pipe_frame_has_everything() -> None:
    st_ = status(7, notice=True, goodput=True)
    out = text(screen(st_, History(), CFG, View(100, None, NOW)))
    snap = st_["snapshot"]
    for name in [*snap["disks"], *snap["nics"], *snap["rdma"]]:
        assert name in out
    assert (
        "goodput 87%" in out
        and "productive 87%  data-storage 8%  checkpoint 4%" in out
        and "(1.00 GPU-h)" in out
        and "idle" not in out
    )
    assert "cost 12.50 USD, wasted 1.59" in out and "cadence: checkpoint every 10 min" in out
    assert "87.3% over" not in out  # the ledger's own ratio line is not said twice
    assert "advice: fix the input first: on any card the data wait stays 40% of each step" in out


def test_the_countdown_is_the_deadline_minus_now() -> None:
    st_ = status(2, notice=True)
    deadline = datetime.fromisoformat(st_["preemption"]["active"][0]["deadline"]).timestamp()
    for later in (0.0, 7.0, deadline - NOW - 1):
        out = text(screen(st_, History(), CFG, View(120, 40, NOW + later)))
        m = re.search(r"(\d\d):(\d\d) left", out)
        assert m is not None, out
        left = int(m.group(1)) * 60 + int(m.group(2))
        assert 0 <= left - (deadline - NOW - later) < 1
    out = text(screen(st_, History(), CFG, View(120, 40, deadline + 75)))
    assert "passed 01:15 ago" in out and not re.search(r"\d\d:\d\d left", out)


def test_sparklines_keep_the_last_minute_scaled_to_capacity() -> None:
    hist = History()
    for i in range(HISTORY + 30):
        hist.record({"snapshot": {"seq": i, "nics": {"eth0": {"rx_bytes_per_second": i * 1e6}}}})
        hist.record({"snapshot": {"seq": i, "nics": {"eth0": {"rx_bytes_per_second": 0.0}}}})  # same tick
    series = hist.get("nics:eth0")
    assert len(series) == HISTORY and series[-1] == (HISTORY + 29) * 1e6 and series[0] == 30e6
    line = sparkline(series, 30, top=series[-1])
    assert len(line) == 30 and line[-1] == "█" and list(line) == sorted(line)  # rising, unicode blocks order
    assert sparkline(series, 30, top=series[-1] * 10)[-1] in "▁▂"  # against a big capacity it is low
    st_ = {"snapshot": {"seq": 1, "nics": {"eth0": {"rx_bytes_per_second": series[-1], "speed_bytes": 1e8}}}}
    for width in (80, 120, 200):
        row = next(
            t.plain for t in screen(st_, hist, CFG, View(width, 24, NOW)) if t.plain.startswith("nic ")
        )
        spark = row.split("│")[0].rstrip().rsplit(" ", 1)[-1]  # from 160 columns a panel sits beside it
        assert len(spark) >= 4 and set(spark) <= set("▁▂▃▄▅▆▇█ ") and len(row) <= width, row


@settings(max_examples=300, deadline=None)
@given(
    util=st.one_of(st.none(), st.floats(0, 1)),
    sm=st.one_of(st.none(), st.floats(0, 1)),
    tensor=st.one_of(st.none(), st.floats(0, 1)),
    power=st.one_of(st.none(), st.floats(0, 800)),
    limit=st.one_of(st.none(), st.floats(100, 800)),
    idle=st.one_of(st.none(), st.floats(20, 200)),
)
def test_spin_is_what_the_classifier_counts_as_spinning(
    util: float | None,
    sm: float | None,
    tensor: float | None,
    power: float | None,
    limit: float | None,
    idle: float | None,
) -> None:
    learned = Baselines(idle_power={"GPU-0": idle} if idle is not None else {})
    g = {
        "index": 0,
        "uuid": "GPU-0",
        "up": True,
        "utilization_ratio": util,
        "sm_active_ratio": sm,
        "tensor_active_ratio": tensor,
        "power_watts": power,
        "power_limit_watts": limit,
    }
    sample = Sample(
        0.0, 0.0, (GpuSample(0, "GPU-0", True, util, power, limit, sm if sm is not None else tensor),), None,
        EMPTY, EMPTY, EMPTY, EMPTY, EMPTY, None, None, EMPTY, {}, EMPTY, {}, EMPTY, EMPTY,
    )  # fmt: skip
    assert spinning(g, CFG, learned) == (gpu_class(sample.gpus[0], learned, CFG) is GpuClass.SPINNING)
