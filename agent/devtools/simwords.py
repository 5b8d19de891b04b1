"""The metadata simulator's own words: its control API's event states and the faults it injects.
The daemon never runs the simulator, so they live with it, not in ``core/vocabulary.py`` (as the
GPU source keeps ``ClockReason`` and the jobs source ``JobSource``)."""

from __future__ import annotations

from enum import StrEnum


class SimEventState(StrEnum):
    """Where an event in the metadata simulator stands (its control API's ``state``)."""

    PENDING = "pending"  # scheduled, not announced yet
    ACTIVE = "active"  # announced on the cloud's paths
    CANCELED = "canceled"
    COMPLETED = "completed"


LIVE_SIM_STATES = frozenset({SimEventState.PENDING, SimEventState.ACTIVE})
ENDED_SIM_STATES = frozenset({SimEventState.CANCELED, SimEventState.COMPLETED})


class SimFault(StrEnum):
    """A fault the metadata simulator injects into its answers (``POST /sim/faults`` ``kind``)."""

    STATUS = "status"  # an HTTP error status
    SLOW = "slow"  # the answer after a delay
    GARBAGE = "garbage"  # bytes that parse as nothing
    EMPTY = "empty"
    HUGE = "huge"  # a body over any sane limit
    DROP = "drop"  # the connection closed without an answer
