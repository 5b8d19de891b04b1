"""CPU per /metrics render: our text encoder (agent/exporter/text.py) against prometheus_client's
``generate_latest``, the peer, on the same live registry in the same run (an in-process agent with
8 fake GPUs), plus a check that both give the same bytes; and what a scrape between two ticks costs
now that the snapshot's text is kept (``Registry.text``: only the live families are rendered).

    .venv/bin/python bench/exposition_text.py [--gpus 8] [--renders 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import structlog  # noqa: E402
from prometheus_client.exposition import generate_latest  # noqa: E402

from agent.config import parse_config  # noqa: E402
from agent.devtools.fake_nvml import LIBRARY, FakeNvml  # noqa: E402
from agent.exporter.text import render_text  # noqa: E402
from agent.runtime.daemon import Daemon  # noqa: E402


def cpu_ms(fn: Callable[[], bytes], n: int) -> float:
    for _ in range(20):
        fn()
    t0 = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t0) / n * 1000


async def measure(tmp: Path, gpus: int, renders: int) -> None:
    fake = FakeNvml(tmp / "nvml.json", gpus=gpus)
    os.environ["FAKE_NVML_STATE"] = str(fake.path)
    cfg = parse_config(
        {
            "agent": {"state_dir": str(tmp / "state"), "runtime_dir": str(tmp / "run")},
            "http": {"listen": "127.0.0.1:0", "control_socket": str(tmp / "run" / "control.sock")},
            "gpu": {"library": str(LIBRARY)},
            "trainer": {"discovery_file": str(tmp / "run" / "agent.json")},
            "preemption": {"provider": "none"},
        }
    )
    daemon = Daemon(cfg, None)
    run = asyncio.create_task(daemon.run())
    try:
        await asyncio.sleep(4)
        reg = daemon.registry
        ours = cpu_ms(lambda: render_text(reg.collect()), renders)
        peer = cpu_ms(lambda: generate_latest(reg), renders)
        kept = cpu_ms(reg.text, renders)
        same = render_text(reg.collect()) == generate_latest(reg) == reg.text()
        size = len(generate_latest(reg))
    finally:
        daemon._stop.set()
        await run
    print(f"{gpus} fake GPUs, {size} bytes per scrape, {renders} renders each (CPU ms per render)")
    print(f"  agent text encoder        {ours:7.3f}")
    print(f"  prometheus_client (peer)  {peer:7.3f}")
    print(f"  ratio                     {ours / peer:7.2f}   same bytes: {same}")
    print(f"  between ticks (kept text) {kept:7.3f}   ratio to the full render {kept / ours:.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--renders", type=int, default=300)
    args = p.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(measure(Path(tmp), args.gpus, args.renders))


if __name__ == "__main__":
    main()
