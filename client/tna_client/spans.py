"""What the training process knows of its own pauses, told to the agent with its step figures.

The agent tells a save, an evaluation or a wait for input from outside (its write bytes, the GPUs'
readings); where this client runs inside the trainer it says so itself, and the agent takes that as
ground truth ("from the trainer"). Three kinds:

- ``checkpoint``: a save the training loop waits for (Lightning's CheckpointIO, Hugging Face's save,
  :meth:`tna_client.torch_dist.DistributedCheckpoint.checkpoint`);
- ``evaluation``: a validation or evaluation loop (``on_validation_*``, Hugging Face's evaluate);
- ``data``: the wait for the next batch between steps, where the framework exposes it (many short
  waits: added up, never listed one by one, and written with the next step report).

A checkpoint or evaluation span rewrites the step report when it begins and when it ends, so the
agent, which looks every tick, books the seconds of an open one as they pass; its report carries
the seconds and count of each kind since the trainer started, and the last ``RECENT`` spans with
their wall-clock edges (``[kind, start, end]``, ``end`` null while open). Format in
:mod:`tna_client.steps`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

KINDS = ("checkpoint", "evaluation", "data")
LISTED = ("checkpoint", "evaluation")  # kinds rare and long enough to list one by one
RECENT = 16


class SpanRecorder:
    """The spans behind :meth:`PreemptionGuard.span`; the step reporter inherits it."""

    _span_totals: dict[str, list[float]]
    _span_open: dict[str, tuple[float, float]]
    _span_recent: deque[tuple[str, float, float]]  # closed spans: kind, wall start, wall end

    def _init_spans(self) -> None:
        self._span_totals = {k: [0, 0.0] for k in KINDS}  # count, seconds
        self._span_open = {}  # kind -> (monotonic start, wall start)
        self._span_recent = deque(maxlen=RECENT)

    def begin(self, kind: str) -> None:
        """A pause of ``kind`` begins (a second begin of an open kind is ignored)."""
        if kind not in KINDS:
            raise ValueError(f"span kind must be one of {', '.join(KINDS)}, not {kind!r}")
        if kind in self._span_open:
            return
        self._span_open[kind] = (time.monotonic(), time.time())
        if kind in LISTED:
            self._report_spans()

    def end(self, kind: str) -> None:
        """The pause of ``kind`` ends (an end with none open is ignored)."""
        opened = self._span_open.pop(kind, None)
        if opened is None:
            return
        seconds = max(0.0, time.monotonic() - opened[0])
        self._count_span(kind, seconds)
        if kind in LISTED:
            self._span_recent.append((kind, opened[1], opened[1] + seconds))
            self._report_spans()

    def waited(self, kind: str, seconds: float) -> None:
        """A pause measured by the caller (the framework's hooks): counted, not listed."""
        if kind not in KINDS:
            raise ValueError(f"span kind must be one of {', '.join(KINDS)}, not {kind!r}")
        if seconds > 0:
            self._count_span(kind, seconds)

    @contextmanager
    def span(self, kind: str) -> Iterator[None]:
        """``with guard.span("evaluation"): ...``"""
        self.begin(kind)
        try:
            yield
        finally:
            self.end(kind)

    def _count_span(self, kind: str, seconds: float) -> None:
        t = self._span_totals[kind]
        t[0] += 1
        t[1] += seconds

    def _span_body(self) -> dict[str, Any]:
        recent = [[k, round(a, 3), round(b, 3)] for k, a, b in self._span_recent]
        recent += [[k, round(w, 3), None] for k, (_, w) in self._span_open.items() if k in LISTED]
        return {
            "spans": {
                k: {"count": int(c), "seconds": round(s, 6)} for k, (c, s) in self._span_totals.items()
            },
            "recent": recent,
        }

    def _report_spans(self) -> None:
        raise NotImplementedError
