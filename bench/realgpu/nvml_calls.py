"""One answer per NVML call: ``{"value": ..., "error": ..., "ms": ...}``. The calls the agent makes
(agent/sources/gpu/*.py), then the ones it will need soon, on one GPU. Nothing here raises: a call a
driver or binding lacks is an answer like any other."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from typing import Any

import pynvml

from realgpu.record import plain

ALL_LINKS = 0xFFFFFFFF  # scopeId of the NVLink throughput fields: every link together, as the agent asks
NVLINK_LINKS = range(18)  # an H100/H200 SXM has 18
PCIE_TX, PCIE_RX = 197, 198  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES / RX_BYTES
NVLINK_TX, NVLINK_RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / RX (KiB)
POWER_AVERAGE, POWER_INSTANT = 185, 186  # NVML_FI_DEV_POWER_AVERAGE / INSTANT (mW)
AGENT_FIELDS = ((PCIE_TX, 0), (PCIE_RX, 0), (NVLINK_TX, ALL_LINKS), (NVLINK_RX, ALL_LINKS))
POWER_FIELDS = ((POWER_AVERAGE, 0), (POWER_INSTANT, 0))
# GPM metric ids: GRAPHICS_UTIL, SM_UTIL (DCGM's SM_ACTIVE), SM_OCCUPANCY, ANY_TENSOR_UTIL, DRAM_BW_UTIL
GPM_METRICS = {1: "graphics_util", 2: "sm_util", 3: "sm_occupancy", 5: "any_tensor_util", 10: "dram_bw_util"}
SAMPLE_KINDS = {"total_power": 0, "gpu_utilization": 1, "memory_utilization": 2}  # nvmlSamplingType_t

ERROR_NAMES = {v: k for k, v in vars(pynvml).items() if k.startswith("NVML_ERROR_") and isinstance(v, int)}
ERROR_NAMES[0] = "NVML_SUCCESS"
BINDING_MISSING = "BINDING_MISSING"


def error_of(e: BaseException) -> dict[str, Any]:
    if isinstance(e, pynvml.NVMLError):
        code = int(getattr(e, "value", -1))
        try:
            text = str(e)
        except Exception:  # str() asks the library, which may be what is broken
            text = f"NVML error {code}"
        return {"name": ERROR_NAMES.get(code, str(code)), "code": code, "text": text}
    return {"name": type(e).__name__, "text": str(e)}


def code_name(code: int) -> str:
    return ERROR_NAMES.get(code, str(code))


def answer(fn: Callable[..., Any] | None, *args: Any, name: str = "", **kw: Any) -> dict[str, Any]:
    """``fn(*args)`` as an answer; ``fn`` None is a function this nvidia-ml-py does not bind."""
    if fn is None:
        version = getattr(pynvml, "__version__", "?")
        return {
            "value": None,
            "error": {"name": BINDING_MISSING, "text": f"nvidia-ml-py {version}: no {name}"},
        }
    t0 = time.perf_counter()
    try:
        value = fn(*args, **kw)
    except Exception as e:
        return {"value": None, "error": error_of(e), "ms": _ms(t0)}
    return {"value": plain(value), "error": None, "ms": _ms(t0)}


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def bound(name: str) -> Callable[..., Any] | None:
    return getattr(pynvml, name, None)


def raw_uint(name: str, out: type = ctypes.c_uint) -> Callable[..., Any]:
    """``name(device, *unsigned args, out*)`` straight through ctypes, for a function this binding
    lacks; a driver without it answers FUNCTION_NOT_FOUND, as pynvml would."""

    def call(handle: Any, *args: int) -> Any:
        lib = pynvml.nvmlLib
        fn = getattr(lib, name, None) if lib is not None else None
        if fn is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        value = out()
        ret = fn(handle, *(ctypes.c_uint(a) for a in args), ctypes.byref(value))
        if ret != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(ret)
        return value.value

    call.__name__ = name
    return call


def call(name: str, *args: Any, raw: type | None = None, **kw: Any) -> dict[str, Any]:
    """The binding's ``name``; where it lacks one and ``raw`` says the C function's output type, ctypes."""
    fn = bound(name)
    if fn is None and raw is not None:
        fn = raw_uint(name, raw)
    return answer(fn, *args, name=name, **kw)


def field_answers(handle: Any, fields: tuple[tuple[int, int], ...]) -> dict[str, Any]:
    """One ``nvmlDeviceGetFieldValues`` call; each field's own return and value."""
    got = answer(bound("nvmlDeviceGetFieldValues"), handle, list(fields), name="nvmlDeviceGetFieldValues")
    if got["error"] is not None:
        return {"call": got}
    out: dict[str, Any] = {"call": {"error": None, "ms": got["ms"]}}
    for (field_id, scope), v in zip(fields, got["value"], strict=True):
        ret = v["nvmlReturn"]
        value = field_number(v) if ret == pynvml.NVML_SUCCESS else None
        err = None if ret == pynvml.NVML_SUCCESS else {"name": code_name(ret), "code": ret}
        out[f"{field_id}@{scope:#x}"] = {"value": value, "error": err, "timestamp_us": v["timestamp"]}
    return out


# the member of nvmlValue_t holding each nvmlValueType_t (double, uint, ulong, ull, sll, int, ushort)
VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def value_of(value_type: int, value: dict[str, Any]) -> Any:
    return value.get(VALUE_MEMBERS.get(value_type, "ullVal"))


def field_number(v: dict[str, Any]) -> Any:
    return value_of(v["valueType"], v["value"])


def system_answers() -> dict[str, Any]:
    return {
        "nvmlSystemGetDriverVersion": call("nvmlSystemGetDriverVersion"),
        "nvmlSystemGetNVMLVersion": call("nvmlSystemGetNVMLVersion"),
        "nvmlSystemGetCudaDriverVersion": call("nvmlSystemGetCudaDriverVersion"),
        "nvmlDeviceGetCount": call("nvmlDeviceGetCount"),
    }


def agent_answers(handle: Any) -> dict[str, Any]:
    """Every call agent/sources/gpu makes on a GPU, with the arguments it passes."""
    p = pynvml
    v2 = getattr(p, "nvmlMemory_v2", None)
    out = {
        "nvmlDeviceGetName": call("nvmlDeviceGetName", handle),
        "nvmlDeviceGetUUID": call("nvmlDeviceGetUUID", handle),
        "nvmlDeviceGetPciInfo_v3": call("nvmlDeviceGetPciInfo_v3", handle),
        "nvmlDeviceGetUtilizationRates": call("nvmlDeviceGetUtilizationRates", handle),
        "nvmlDeviceGetMemoryInfo": call("nvmlDeviceGetMemoryInfo", handle),
        "nvmlDeviceGetMemoryInfo_v2": (
            call("nvmlDeviceGetMemoryInfo", handle, version=v2)
            if v2 is not None
            else answer(None, name="nvmlMemory_v2")
        ),
        "nvmlDeviceGetPowerUsage": call("nvmlDeviceGetPowerUsage", handle),
        "nvmlDeviceGetEnforcedPowerLimit": call("nvmlDeviceGetEnforcedPowerLimit", handle),
        "nvmlDeviceGetTotalEccErrors": call(
            "nvmlDeviceGetTotalEccErrors", handle, p.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, p.NVML_VOLATILE_ECC
        ),
        "nvmlDeviceGetRemappedRows": call("nvmlDeviceGetRemappedRows", handle),
        "nvmlDeviceGetTemperature": call("nvmlDeviceGetTemperature", handle, p.NVML_TEMPERATURE_GPU),
        "nvmlDeviceGetClockInfo(SM)": call("nvmlDeviceGetClockInfo", handle, p.NVML_CLOCK_SM),
        "nvmlDeviceGetCurrentClocksEventReasons": call("nvmlDeviceGetCurrentClocksEventReasons", handle),
        "nvmlDeviceGetCurrentClocksThrottleReasons": call(
            "nvmlDeviceGetCurrentClocksThrottleReasons", handle
        ),
        "nvmlDeviceGetFieldValues": field_answers(handle, AGENT_FIELDS),
        "nvmlDeviceGetComputeRunningProcesses_v3": call("nvmlDeviceGetComputeRunningProcesses_v3", handle),
        "nvmlGpmQueryDeviceSupport": call("nvmlGpmQueryDeviceSupport", handle),
    }
    out.update(event_answers(handle))
    return out


def event_answers(handle: Any) -> dict[str, Any]:
    """The Xid watcher's calls: an event set, registration, one short wait (a timeout is the answer
    expected from a healthy GPU), the set freed."""
    out = {"nvmlDeviceGetSupportedEventTypes": call("nvmlDeviceGetSupportedEventTypes", handle)}
    t0 = time.perf_counter()
    try:
        event_set = pynvml.nvmlEventSetCreate()
    except Exception as e:
        out["nvmlEventSetCreate"] = {"value": None, "error": error_of(e), "ms": _ms(t0)}
        return out
    out["nvmlEventSetCreate"] = {"value": "created", "error": None, "ms": _ms(t0)}
    out["nvmlDeviceRegisterEvents(Xid)"] = call(
        "nvmlDeviceRegisterEvents", handle, pynvml.nvmlEventTypeXidCriticalError, event_set
    )
    out["nvmlEventSetWait(100ms)"] = call("nvmlEventSetWait", event_set, 100)
    out["nvmlEventSetFree"] = call("nvmlEventSetFree", event_set)
    return out


def soon_answers(handle: Any) -> dict[str, Any]:
    """Calls the agent will need soon: one answer each (the timed ones are in nvml_timing)."""
    p = pynvml
    out: dict[str, Any] = {
        "nvmlDeviceGetTotalEnergyConsumption": call(
            "nvmlDeviceGetTotalEnergyConsumption", handle, raw=ctypes.c_ulonglong
        ),
        "nvmlDeviceGetFieldValues(power)": field_answers(handle, POWER_FIELDS),
        "nvmlDeviceGetCurrPcieLinkGeneration": call(
            "nvmlDeviceGetCurrPcieLinkGeneration", handle, raw=ctypes.c_uint
        ),
        "nvmlDeviceGetCurrPcieLinkWidth": call("nvmlDeviceGetCurrPcieLinkWidth", handle, raw=ctypes.c_uint),
        "nvmlDeviceGetMaxPcieLinkGeneration": call(
            "nvmlDeviceGetMaxPcieLinkGeneration", handle, raw=ctypes.c_uint
        ),
        "nvmlDeviceGetMaxPcieLinkWidth": call("nvmlDeviceGetMaxPcieLinkWidth", handle, raw=ctypes.c_uint),
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": call(
            "nvmlDeviceGetGpuMaxPcieLinkGeneration", handle, raw=ctypes.c_uint
        ),
        "nvmlDeviceGetMaxClockInfo(SM)": call("nvmlDeviceGetMaxClockInfo", handle, p.NVML_CLOCK_SM),
        "nvmlDeviceGetPowerManagementDefaultLimit": call(
            "nvmlDeviceGetPowerManagementDefaultLimit", handle, raw=ctypes.c_uint
        ),
        "nvmlDeviceGetMigMode": call("nvmlDeviceGetMigMode", handle),
        "nvmlDeviceGetNvLinkState": {
            str(link): call("nvmlDeviceGetNvLinkState", handle, link, raw=ctypes.c_uint)
            for link in NVLINK_LINKS
        },
    }
    for kind, code in SAMPLE_KINDS.items():
        got = call("nvmlDeviceGetSamples", handle, code, 0)
        out[f"nvmlDeviceGetSamples({kind})"] = {**got, "value": _sample_summary(got["value"])}
    return out


def _sample_summary(value: Any) -> Any:
    """How many samples came back (their values are studied in nvml_timing)."""
    if not isinstance(value, list) or len(value) != 2:
        return value
    value_type, samples = value
    return {"value_type": value_type, "count": len(samples)}
