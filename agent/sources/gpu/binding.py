"""The NVML binding as the agent holds it: which library pynvml loads, stand-ins for functions an
older nvidia-ml-py lacks, NVML errors as text, and pynvml's structures read without its overhead.
The NVML session over it (devices, reads, error sets, lost GPUs) is ``nvml.py``."""

from __future__ import annotations

import ctypes
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


def handle_address(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


def field_value(v: Any) -> int:
    return int(getattr(number(v, "value"), _VALUE_MEMBER.get(number(v, "valueType"), "ullVal")))


# the member of nvmlValue_t that holds each nvmlValueType_t
_VALUE_MEMBER = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}
