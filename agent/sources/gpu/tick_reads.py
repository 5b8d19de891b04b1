"""The reads every GPU gets every tick, made straight through the library's function pointers into
outputs made once per GPU (``Outputs``), with ``Nvml.read``'s rules for a GPU or driver that cannot
answer (``direct``).

pynvml's wrappers look the function up under a lock, build a new output structure each call (its
fields set through a Python-level ``__setattr__``) and, for the compute processes, call twice and
copy each row into a new object. With the CPU's caches cold, as they are at one tick a second, the
seven reads here cost 200 µs a tick for 8 fake GPUs through the wrappers and 120 µs straight;
``bench/gpu_scaling.py --quick`` puts the 8-GPU collect() 17% lower with them (docs/gpu.md "Cost").
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import pynvml

from agent.sources.gpu.binding import NOT_AVAILABLE, PROCESS_INFO, function, number
from agent.sources.gpu.part import GpuProcess

if TYPE_CHECKING:
    from agent.sources.gpu.nvml import Device, Nvml

UTILIZATION = "nvmlDeviceGetUtilizationRates"
MEMORY, MEMORY_V1 = "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"
TEMPERATURE = "nvmlDeviceGetTemperature"
CLOCK = "nvmlDeviceGetClockInfo"
# the clocks event reasons, under their name before driver 535 where the new one is missing
REASONS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
ENERGY = "nvmlDeviceGetTotalEnergyConsumption"
PROCESSES = "nvmlDeviceGetComputeRunningProcesses_v3"


def call(nvml: Nvml, dev: Device, name: str, *args: Any) -> int | None:
    """``name(handle, *args)`` through the library's function pointer: its nvmlReturn_t, or None
    where this GPU or driver is known not to answer it (skipped as unsupported, or missing)."""
    if not nvml.asks(dev, name):
        return None
    try:
        fn = function(name)
    except pynvml.NVMLError as e:
        nvml.failed(dev, name, e)
        return None
    return int(fn(dev.handle, *args))


def direct(nvml: Nvml, dev: Device, name: str, *args: Any) -> bool:
    """``call`` with ``Nvml.read``'s rules: whether it answered (its outputs in ``args`` filled)."""
    ret = call(nvml, dev, name, *args)
    if ret is None:
        return False
    if ret != pynvml.NVML_SUCCESS:
        nvml.failed(dev, name, pynvml.NVMLError(ret))
        return False
    return True


def rates(nvml: Nvml, dev: Device) -> tuple[int, int] | None:
    """The last sample period's (kernel, memory) utilization in percent."""
    out = dev.out.utilization
    if not direct(nvml, dev, UTILIZATION, ctypes.byref(out)):
        return None
    return number(out, "gpu"), number(out, "memory")


def memory(nvml: Nvml, dev: Device) -> tuple[int, int] | None:
    """(used, total) bytes: v2's "used" leaves out the driver's own reservation, which v1 counts."""
    out = dev.out
    for name, struct in ((MEMORY, out.memory), (MEMORY_V1, out.memory_v1)):
        if struct is None:
            nvml.skip(None, name, "this nvidia-ml-py has no nvmlMemory_v2_t")
        elif direct(nvml, dev, name, ctypes.byref(struct)):
            return number(struct, "used"), number(struct, "total")
    return None


def uint(nvml: Nvml, dev: Device, name: str, arg: int) -> int | None:
    """``name(handle, arg, &unsigned int)``: the temperature of a sensor, the clock of a domain."""
    out = dev.out.uint
    return out.value if direct(nvml, dev, name, arg, ctypes.byref(out)) else None


def ulonglong(nvml: Nvml, dev: Device, *names: str) -> int | None:
    """``name(handle, &unsigned long long)`` of the first of ``names`` that answers."""
    out = dev.out.ulonglong
    for name in names:
        if direct(nvml, dev, name, ctypes.byref(out)):
            return out.value
    return None


def processes(nvml: Nvml, dev: Device) -> tuple[GpuProcess, ...] | None:
    """The compute processes on the GPU (pid, bytes used; None where the driver cannot say, as on
    Windows' WDDM), in one call where they fit the rows asked for."""
    out = dev.out
    if out.processes is None:
        nvml.skip(None, PROCESSES, "this nvidia-ml-py has no nvmlProcessInfo_v3_t")
        return None
    for _ in range(2):
        out.count.value = len(out.processes)
        ret = call(nvml, dev, PROCESSES, ctypes.byref(out.count), out.processes)
        if ret == pynvml.NVML_SUCCESS:
            return tuple(
                GpuProcess(
                    number(p, "pid"), None if (m := number(p, "usedGpuMemory")) == NOT_AVAILABLE else m
                )
                for p in out.processes[: out.count.value]
            )
        if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
            if ret is not None:
                nvml.failed(dev, PROCESSES, pynvml.NVMLError(ret))
            return None
        # more processes than rows: room for the count and a few that may start meanwhile
        out.processes = (PROCESS_INFO * (out.count.value * 2 + 5))()  # type: ignore[operator]
    return None  # still more: no processes this tick


def _process(row: object) -> GpuProcess:
    used = number(row, "usedGpuMemory")
    return GpuProcess(number(row, "pid"), None if used == NOT_AVAILABLE else used)
