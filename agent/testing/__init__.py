"""Drivers for the agent's test doubles (the fake NVML), shared by the tests, the demo and the lab."""
