"""The NVML binding as the agent holds it: which library pynvml loads, stand-ins for functions an
older nvidia-ml-py lacks, NVML errors as text, and pynvml's structures read without its overhead.
The NVML session over it (devices, reads, error sets, lost GPUs) is ``nvml.py``."""

from __future__ import annotations

import ctypes
import struct
import sys
from collections.abc import Callable
from typing import Any

import pynvml

from agent.sources import SourceAbsent
from agent.sources.gpu import SYSTEM_LIBRARY

# A numeric field of a pynvml structure. Plain ``struct.field`` goes through pynvml's Python-level
# __getattribute__ (it decodes bytes fields), three times the cost of the field itself; field values
# and GPM metrics read ~20 numbers per GPU per tick.
number: Callable[[Any, str], Any] = object.__getattribute__


def error_text(e: pynvml.NVMLError) -> str:
    try:
        return str(e)
    except Exception:  # str() asks the library, which may be the thing that is broken
        return f"NVML error {getattr(e, 'value', '?')}"


def missing_function(name: str) -> Callable[..., Any]:
    """A stand-in for a function this nvidia-ml-py release lacks: it fails like an old driver would."""

    def missing(*_args: Any, **_kwargs: Any) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    missing.__name__ = name
    return missing


def binding(name: str) -> Callable[..., Any]:
    return getattr(pynvml, name, None) or missing_function(name)


def load_library(path: str) -> None:
    """Hand pynvml the library to use. pynvml loads ``libnvidia-ml.so.1`` itself only while its
    ``nvmlLib`` is unset, so setting it first makes a configured path work and keeps one code path."""
    name = path or SYSTEM_LIBRARY
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        raise SourceAbsent(f"no NVML library: {e}") from None
    with pynvml.libLoadLock:
        old = pynvml.nvmlLib
        if old is None or getattr(old, "_handle", None) != lib._handle:
            pynvml.nvmlLib = lib
            getattr(pynvml, "_nvmlGetFunctionPointer_cache", {}).clear()
            _pointers.clear()


# the library's functions that are called straight, every tick (tick_reads.py, the sample buffer,
# GPM): found once per loaded library. pynvml finds them under its load lock on every call.
_pointers: dict[str, Any] = {}


def function(name: str) -> Any:
    """The loaded library's ``name``, to call with ctypes arguments; it returns an nvmlReturn_t.
    Raises pynvml.NVMLError (FUNCTION_NOT_FOUND where the driver lacks it, UNINITIALIZED with no
    library loaded), as pynvml's wrappers would."""
    fn = _pointers.get(name)
    if fn is None:
        fn = _pointers[name] = pynvml._nvmlGetFunctionPointer(name)
    return fn


def handle_address(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


# nvmlFieldValue_t as bytes: fieldId, scopeId, timestamp, latencyUsec, valueType, nvmlReturn, value
# (a union of 8 bytes, read here as its 64 bits). One unpack per field instead of ctypes attribute by
# attribute: the field values are 14 per GPU per tick, and reading them was a fifth of a GPU's reads.
_FIELD_ROW = struct.Struct("=IIqqIIQ")
if _FIELD_ROW.size != ctypes.sizeof(pynvml.c_nvmlFieldValue_t):
    raise ImportError(f"nvmlFieldValue_t is not the {_FIELD_ROW.size} bytes its reader expects")
_BITS64 = struct.Struct("=Q")
_BIG_ENDIAN = sys.byteorder == "big"
_DOUBLE = struct.Struct("=d")
# the low bits of the union that hold each narrower nvmlValueType_t, and whether it is signed
_NARROW = {
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: (32, False),
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: (32, True),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: (16, False),
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: (64, True),
}
if ctypes.sizeof(ctypes.c_ulong) == 4:
    _NARROW[pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG] = (32, False)
_WIDE = frozenset(
    {pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG} - set(_NARROW)
)


def field_results(values: Any) -> list[tuple[int, int]]:
    """Each nvmlFieldValue_t of a filled array as (its nvmlReturn, its value as an int), the value
    read by its ``valueType``. The union's members all start at its first byte: the low bits of the
    64 on a little-endian machine, the high ones on a big-endian one. The counters are 64-bit, taken
    as they are; the narrower types go through ``_value``."""
    return [
        (ret, bits if kind in _WIDE else _value(kind, bits))
        for _fid, _scope, _ts, _lat, kind, ret, bits in _FIELD_ROW.iter_unpack(memoryview(values).cast("B"))
    ]


def _value(kind: int, bits: int) -> int:
    if kind == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return int(_DOUBLE.unpack(_BITS64.pack(bits))[0])
    narrow = _NARROW.get(kind)
    if narrow is None:
        return bits
    width, signed = narrow
    v = (bits >> (64 - width if _BIG_ENDIAN else 0)) & ((1 << width) - 1)
    return v - (1 << width) if signed and v >> (width - 1) else v


# structures an older nvidia-ml-py may lack: the read then fails as a driver without the call would
MEMORY_V2 = getattr(pynvml, "c_nvmlMemory_v2_t", None)
MEMORY_V2_VERSION = getattr(pynvml, "nvmlMemory_v2", None)
PROCESS_INFO = getattr(pynvml, "c_nvmlProcessInfo_v3_t", None)
NOT_AVAILABLE = 2**64 - 1  # NVML_VALUENOT_AVAILABLE as an unsigned long long (usedGpuMemory)
PROCESS_ROOM = 8  # process rows asked for at first; grown to the driver's count and some when short


class Outputs:
    """One GPU's outputs for the reads made straight through the library (``tick_reads.py``), made
    once. A GPU is read by one thread at a time (a reader, or the one its hung call holds, never
    asked again until it returns), so they are never shared."""

    __slots__ = ("count", "memory", "memory_v1", "processes", "uint", "ulonglong", "utilization")

    def __init__(self) -> None:
        self.uint = ctypes.c_uint()
        self.ulonglong = ctypes.c_ulonglong()
        self.utilization = pynvml.c_nvmlUtilization_t()
        self.memory_v1 = pynvml.c_nvmlMemory_t()
        self.memory = None
        if MEMORY_V2 is not None and MEMORY_V2_VERSION is not None:
            self.memory = MEMORY_V2()
            self.memory.version = MEMORY_V2_VERSION
        self.count = ctypes.c_uint()
        self.processes = (PROCESS_INFO * PROCESS_ROOM)() if PROCESS_INFO is not None else None
