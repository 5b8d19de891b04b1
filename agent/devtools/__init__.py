"""Drivers for the agent's test doubles (the fake NVML, the metadata simulator in its own process),
shared by the tests, the benchmarks, the demo and the lab."""

from pathlib import Path

# the source tree (when run from a checkout): where ``python -m agent`` and ``make fakenvml`` run
REPO = Path(__file__).resolve().parents[2]
