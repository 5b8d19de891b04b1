"""What the classifier learns about this node and keeps across restarts.

- read and link capacities: the highest sustained throughput seen per disk, NFS mount, NIC and RDMA
  port (the 90th percentile of a window, so one lucky interval does not set it), in two consecutive
  learning windows (so one window of a transient does not set it either);
- each GPU's idle power (keyed by UUID: indices move when a GPU drops off the bus);
- each GPU's work measure at full work (SM activity, or power above idle over the span, per second
  of kernel time), sustained over a window, so a sample's work is a share of it (``gpus.shares``);
- each NFS mount's normal READ RTT (the lowest window median).

Learning is a pure function from a window to new :class:`Baselines`; the file under ``state_dir`` is
written atomically and a damaged file is set aside with a warning, never fatal.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import truediv
from pathlib import Path
from typing import Any

import structlog

from agent.classifier.families import CAPACITIES, KINDS
from agent.classifier.samples import Sample, columns
from agent.config.classifier import ClassifierSection
from agent.core.statefile import load_json, save_state

log = structlog.get_logger("classifier")

FILE_NAME = "classifier-baselines.json"
# the configured default of idle_power_ratio: learning is pure of the config (``idle_power`` takes
# the lower of the two where a GPU's idle was learned)
DEFAULT_IDLE_RATIO = ClassifierSection.model_fields["idle_power_ratio"].default
VERSION = 1
PEAK_QUANTILE = 0.9
MIN_RTT_SAMPLES = 3


@dataclass(frozen=True, slots=True)
class Baselines:
    peaks: dict[str, dict[str, float]] = field(default_factory=lambda: {k: {} for k in KINDS})
    idle_power: dict[str, float] = field(default_factory=dict)  # GPU uuid -> watts
    nfs_rtt: dict[str, float] = field(default_factory=dict)  # mountpoint -> seconds
    full_work: dict[str, float] = field(default_factory=dict)  # GPU uuid -> work measure 0-1
    # kind -> device -> what the last learning window sustained, not saved. A peak is learned as the
    # lower of two consecutive windows': a fresh TCP connection's slow start overshoots a cap that
    # sits beyond the host (a hypervisor's, a far shaper's), and the host's tx counter counts what
    # the cap then drops. In a 1.2 s window that read 4.4 MB/s on a 20 Mbit/s link, and the link at
    # its cap then looked a third idle for the rest of the job (a network-bound node called
    # sync-wait). After a restart the first window learns no new peak; the saved ones stand.
    last_sustained: dict[str, dict[str, float]] = field(default_factory=dict, compare=False)

    def saved_same(self, other: Baselines) -> bool:
        """Whether the two would write the same file (the same tables: learning keeps what did not
        move)."""
        return (
            self.peaks is other.peaks
            and self.idle_power is other.idle_power
            and self.nfs_rtt is other.nfs_rtt
            and self.full_work is other.full_work
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "peaks_bytes_per_second": self.peaks,
            "idle_power_watts": self.idle_power,
            "nfs_read_rtt_seconds": self.nfs_rtt,
            "full_work_ratio": self.full_work,
        }

    @classmethod
    def from_json(cls, data: Any) -> Baselines:
        """Strict: anything but the shape we write raises ``ValueError``."""
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError(f"not a version-{VERSION} baselines object")
        peaks_in = data.get("peaks_bytes_per_second", {})
        if not isinstance(peaks_in, dict):
            raise ValueError("peaks_bytes_per_second is not a table")
        peaks = {k: _floats(peaks_in.get(k, {}), f"peaks_bytes_per_second.{k}") for k in KINDS}
        return cls(
            peaks=peaks,
            idle_power=_floats(data.get("idle_power_watts", {}), "idle_power_watts"),
            nfs_rtt=_floats(data.get("nfs_read_rtt_seconds", {}), "nfs_read_rtt_seconds"),
            full_work=_floats(data.get("full_work_ratio", {}), "full_work_ratio"),
        )


def _floats(d: Any, what: str) -> dict[str, float]:
    if not isinstance(d, dict):
        raise ValueError(f"{what} is not a table")
    out: dict[str, float] = {}
    for k, v in d.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{what}.{k} is not a non-negative number: {v!r}")
        out[str(k)] = float(v)
    return out


# --- using them -------------------------------------------------------------------------------------


def capacity(
    kind: str, name: str, baselines: Baselines, cfg: ClassifierSection, link: float | None = None
) -> tuple[float | None, str]:
    """Capacity in bytes/s and where it came from: ``config``, ``link`` or ``learned``.

    A configured value always wins. Then the link speed the kernel reports (``[network] capacity``
    fills it in for NICs whose speed is unknown): a steady trickle on a 25 Gb/s NIC is not a
    saturated link. Disks and NFS mounts have no such speed, nor do most virtual NICs: for them the
    highest sustained rate seen is the capacity, once it reaches ``learn_floor``.
    """
    configured = getattr(cfg, f"{kind}_capacity").get(name)
    if configured:
        return configured, "config"
    if link:
        return link, "link"
    peak = baselines.peaks.get(kind, {}).get(name)
    if cfg.learn_capacities and peak is not None and peak >= cfg.learn_floor:
        return peak, "learned"
    return None, "unknown"


def idle_power(uuid: str, limit: float, baselines: Baselines, cfg: ClassifierSection) -> float:
    """The lower of the learned minimum and ``idle_power_ratio`` of the limit (a GPU that never
    idled while we watched has not shown its idle power yet)."""
    default = cfg.idle_power_ratio * limit
    learned = baselines.idle_power.get(uuid)
    return default if learned is None else min(learned, default)


# --- learning ---------------------------------------------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of an unsorted sequence (sorted here); values must not be empty."""
    return sorted_quantile(sorted(values), q)


def sorted_quantile(s: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of a sorted sequence."""
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def sustained(values: Sequence[float]) -> float:
    """The rate a device sustains over a window: the lower of its PEAK_QUANTILE and the median of its
    busy samples (those at least half that). A sample's rate is bytes over the time between two
    counter reads; a read the host delays past its timestamp (a stolen vCPU, a busy GIL) lends the
    next interval bytes of this one, and on a loaded box at 100 ms ticks single samples read up to
    ~40% over a link's tc cap. A peak learned from such a sample is kept as the ceiling for good, and
    a link at its cap then looks 30% idle. The busy samples' median shrugs the strays off; the
    quantile still asks a peak to fill a tenth of the window (a lone burst is no capacity)."""
    return sorted_sustained(sorted(values))


def sorted_sustained(s: Sequence[float]) -> float:
    """``sustained`` of a sorted sequence."""
    hi = sorted_quantile(s, PEAK_QUANTILE)
    busy = s[bisect_left(s, 0.5 * hi) :]
    return min(hi, busy[(len(busy) - 1) // 2])


PARTS = (*KINDS, "idle_power", "nfs_rtt", "full_work")
# a sample teaches the full-work level only where a kernel ran at least this share of it: the work
# measure per second of kernel time is noise over a few percent of it
FULL_MIN_UTIL = 0.5
MIN_FULL_SAMPLES = 5
PEAK_FAMILIES = {c.kind: c.family for c in CAPACITIES}  # a learned peak per capacity kind


def learn(
    window: Sequence[Sample],
    baselines: Baselines,
    parts: Iterable[str] = PARTS,
    gathered: Mapping[str, Any] | None = None,
) -> Baselines:
    """New baselines after one window, for the ``parts`` named (all by default); the same object (and
    the same tables inside it) for whatever did not move, so the engine's memo of GPU tallies
    survives a learned peak. ``gathered``: part -> what ``gather`` would give for this window, where
    the caller collected it already (``agent.classifier.gathering``)."""
    if not window:
        return baselines
    gathered = gathered or {}
    peaks, idle, rtt = baselines.peaks, baselines.idle_power, baselines.nfs_rtt
    full = baselines.full_work
    last = baselines.last_sustained
    for part in parts:
        data = gathered[part] if part in gathered else gather(window, part)
        if part in PEAK_FAMILIES:
            known, now = _learn_peaks(data, peaks.get(part, {}), last.get(part, {}))
            if known is not peaks.get(part):
                peaks = {**peaks, part: known}
            if now != last.get(part, {}):
                last = {**last, part: now}
        elif part == "idle_power":
            idle = _learn_idle(data, idle)
        elif part == "nfs_rtt":
            rtt = _learn_rtt(data, rtt)
        elif part == "full_work":
            full = _learn_full(data, full, idle)
    if (
        peaks is baselines.peaks
        and idle is baselines.idle_power
        and rtt is baselines.nfs_rtt
        and full is baselines.full_work
        and last is baselines.last_sustained
    ):
        return baselines
    return Baselines(peaks=peaks, idle_power=idle, nfs_rtt=rtt, full_work=full, last_sustained=last)


def gather(window: Sequence[Sample], part: str) -> Any:
    """What ``part`` learns from: per device its values over the window (peaks), per mount the READ
    RTT of each sample that did READs (``nfs_rtt``), per GPU the lowest power drawn while up
    (``idle_power``)."""
    if part in PEAK_FAMILIES:
        return columns(window, PEAK_FAMILIES[part])
    if part == "nfs_rtt":
        ops = columns(window, "nfs_ops")
        return {m: rtts(times, ops.get(m, ())) for m, times in columns(window, "nfs_rtt_time").items()}
    if part == "idle_power":
        low: dict[str, float] = {}
        for s in window:
            lowest(s, low)
        return low
    if part == "full_work":
        # a sample read in GPM windows teaches by its windows: a job that never works a whole tick
        # long still works whole windows, where its tick means only ever mix work with a spin
        busy: dict[str, list[tuple[float, float | None, float | None, float | None]]] = {}
        for s in window:
            for g in s.gpus:
                if not g.up or g.util is None:
                    continue
                if g.windows and g.sm is not None:
                    busy.setdefault(g.uuid, []).extend(
                        (w.busy, w.work, None, None) for w in g.windows if w.busy >= FULL_MIN_UTIL
                    )
                elif g.util >= FULL_MIN_UTIL:
                    busy.setdefault(g.uuid, []).append((g.util, g.sm, g.power, g.limit))
        return busy
    raise ValueError(f"no baselines part {part!r}")


def rtts(times: Sequence[float], ops: Sequence[float]) -> list[float]:
    """Mean READ RTT of each interval that did READs."""
    if len(ops) == len(times) and ops and min(ops) > 0:  # READs in every one (the usual case)
        return list(map(truediv, times, ops))
    return [t / n for t, n in zip(times, ops, strict=False) if n > 0]


def lowest(s: Sample, low: dict[str, float]) -> None:
    """``low`` lowered to the power each up GPU of ``s`` draws, where that is below it."""
    for g in s.gpus:
        if g.up and g.power is not None and g.power > 0 and g.power < low.get(g.uuid, math.inf):
            low[g.uuid] = g.power


def _learn_peaks(
    cols: Mapping[str, Sequence[float]], known: dict[str, float], before: Mapping[str, float]
) -> tuple[dict[str, float], dict[str, float]]:
    """The peaks after one window (``known`` itself where none rose), and what each device
    sustained in it; ``before``: what they sustained in the previous learning window."""
    out = known
    now: dict[str, float] = {}
    for name, values in cols.items():
        # idle intervals are part of the column: a peak must fill PEAK_QUANTILE of the window
        now[name] = here = sustained(values)
        candidate = min(here, before.get(name, 0.0))  # and the window before must have held it
        if candidate > out.get(name, 0.0):
            out = dict(out) if out is known else out
            out[name] = candidate
    return out, now


def _learn_idle(low: Mapping[str, float], known: dict[str, float]) -> dict[str, float]:
    out = known
    for uuid, power in low.items():
        if power < out.get(uuid, math.inf):
            out = dict(out) if out is known else out
            out[uuid] = power
    return out


def _learn_full(
    busy: Mapping[str, Sequence[tuple[float, float | None, float | None, float | None]]],
    known: dict[str, float],
    idle: Mapping[str, float],
) -> dict[str, float]:
    """Each GPU's work measure per second of kernel time, sustained over the window (SM activity
    over utilization; without GPM, power above idle over the span), where it rose. A sample that
    mixes work with starving reads it whole (SM 41% in a half-busy second is 82% of kernel time);
    one that mixes work with a spin reads less, and the sustained quantile passes over it."""
    out = known
    for uuid, readings in busy.items():
        per_kernel_second = []
        for util, sm, power, limit in readings:
            if sm is not None:
                work = sm
            elif power is not None and limit:
                low = min(idle.get(uuid, math.inf), DEFAULT_IDLE_RATIO * limit)
                work = max(0.0, (power - low) / (limit - low)) if limit > low else 0.0
            else:
                continue
            per_kernel_second.append(min(1.0, work / util))
        if len(per_kernel_second) < MIN_FULL_SAMPLES:
            continue
        level = sustained(per_kernel_second)
        if level > out.get(uuid, 0.0):
            out = dict(out) if out is known else out
            out[uuid] = level
    return out


def _learn_rtt(values: Mapping[str, Sequence[float]], known: dict[str, float]) -> dict[str, float]:
    out = known
    for m, rtt in values.items():
        if len(rtt) >= MIN_RTT_SAMPLES:
            median = quantile(rtt, 0.5)
            if 0 < median < out.get(m, math.inf):
                out = dict(out) if out is known else out
                out[m] = median
    return out


# --- persistence ------------------------------------------------------------------------------------


def load(state_dir: Path) -> Baselines:
    loaded = load_json(
        state_dir / FILE_NAME,
        Baselines.from_json,
        log,
        what="classifier baselines",
        instead="learning afresh",
    )
    return Baselines() if loaded is None else loaded


def save(state_dir: Path, baselines: Baselines) -> None:
    save_state(state_dir / FILE_NAME, json.dumps(baselines.to_json(), indent=1, sort_keys=True))
