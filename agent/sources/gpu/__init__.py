"""The GPU source: NVML, one entry per GPU, and the Xid events (source.py registers it)."""

SYSTEM_LIBRARY = "libnvidia-ml.so.1"  # NVML as the driver installs it: the probe looks for it first
