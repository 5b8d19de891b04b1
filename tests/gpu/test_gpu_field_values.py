"""NVML's field values read from the array's bytes (``binding.field_results``) give what ctypes reads
from the union member each ``valueType`` names, for every type and the ends of its range."""

from __future__ import annotations

import ctypes

import pynvml
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.sources.gpu.binding import field_results

ULONG_BITS = ctypes.sizeof(ctypes.c_ulong) * 8

# valueType -> (the union member that holds it, the values it can take)
TYPES = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: ("dVal", st.floats(min_value=-1e15, max_value=1e15)),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: ("uiVal", st.integers(0, 2**32 - 1)),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: ("ulVal", st.integers(0, 2**ULONG_BITS - 1)),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: ("ullVal", st.integers(0, 2**64 - 1)),
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: ("sllVal", st.integers(-(2**63), 2**63 - 1)),
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: ("siVal", st.integers(-(2**31), 2**31 - 1)),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: ("usVal", st.integers(0, 2**16 - 1)),
}

row = st.sampled_from(sorted(TYPES)).flatmap(
    lambda kind: st.tuples(st.just(kind), TYPES[kind][1], st.integers(0, 30), st.integers(0, 2**64 - 1))
)


def filled(rows: list[tuple[int, object, int, int]]) -> ctypes.Array:
    """An array as the driver fills it: each union first set to ``noise`` in all its 8 bytes, then
    the member of its type written over it (a narrow member leaves the noise in the bytes above it)."""
    values = (pynvml.c_nvmlFieldValue_t * len(rows))()
    for i, (kind, value, ret, noise) in enumerate(rows):
        v = values[i]
        v.fieldId, v.scopeId, v.timestamp, v.latencyUsec = 100 + i, i % 4, 1_700_000_000_000_000 + i, 5
        v.valueType, v.nvmlReturn = kind, ret
        v.value.ullVal = noise
        setattr(v.value, TYPES[kind][0], value)
    return values


@settings(max_examples=200, deadline=None)
@given(st.lists(row, min_size=1, max_size=20))
def test_each_value_reads_as_ctypes_reads_its_member(rows):
    values = filled(rows)
    expected = [(int(v.nvmlReturn), int(getattr(v.value, TYPES[int(v.valueType)][0]))) for v in values]
    assert list(field_results(values)) == expected


def test_the_ends_of_each_signed_range_and_a_failed_field():
    rows = [
        (pynvml.NVML_VALUE_TYPE_SIGNED_INT, -1, pynvml.NVML_SUCCESS, 0),
        (pynvml.NVML_VALUE_TYPE_SIGNED_INT, -(2**31), pynvml.NVML_SUCCESS, 2**64 - 1),
        (pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, -(2**63), pynvml.NVML_SUCCESS, 0),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, 65535, pynvml.NVML_SUCCESS, 2**64 - 1),
        (pynvml.NVML_VALUE_TYPE_DOUBLE, 12.9, pynvml.NVML_SUCCESS, 0),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 7, pynvml.NVML_ERROR_NOT_SUPPORTED, 0),
    ]
    assert list(field_results(filled(rows))) == [
        (pynvml.NVML_SUCCESS, -1),
        (pynvml.NVML_SUCCESS, -(2**31)),
        (pynvml.NVML_SUCCESS, -(2**63)),
        (pynvml.NVML_SUCCESS, 65535),
        (pynvml.NVML_SUCCESS, 12),
        (pynvml.NVML_ERROR_NOT_SUPPORTED, 7),
    ]
