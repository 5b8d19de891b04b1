"""GPU faults as events: each snapshot is compared with the one before and a :class:`GpuFaultEvent`
is published for a new Xid error, a GPU that fell off the bus (and its return), a rise in
uncorrectable ECC errors or a failed row remap, and thermal or power throttling that lasts longer
than its hold (with a ``cleared`` event when it ends).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, Metric

from agent.core.component import HasMetrics, HasStatus
from agent.core.events import GpuFaultEvent
from agent.core.vocabulary import GpuFault
from agent.runtime.context import Context
from agent.snapshot import NodeSnapshot
from agent.sources.gpu import reasons as clock_reasons
from agent.sources.gpu.part import GpuPart, GpuStats


@dataclass
class _Throttle:
    since: float | None = None  # monotonic time the reason was first seen in this stretch
    raised: bool = False


class GpuHealth(HasMetrics, HasStatus):
    name = "gpu-health"

    def __init__(self, ctx: Context) -> None:
        self._bus = ctx.bus
        self._holds = (
            (GpuFault.THERMAL_THROTTLE, clock_reasons.THERMAL, ctx.cfg.gpu.thermal_throttle_hold),
            (GpuFault.POWER_THROTTLE, clock_reasons.POWER, ctx.cfg.gpu.power_throttle_hold),
        )
        # by index: a GPU lost since start has no UUID until it answers again
        self._prev: dict[int, GpuStats] = {}
        self._throttle: dict[tuple[int, str], _Throttle] = {}
        self.published: Counter[str] = Counter()
        ctx.snapshot_listeners.append(self.on_snapshot)

    async def run(self) -> None:
        await asyncio.Event().wait()  # all work happens in on_snapshot

    async def stop(self) -> None:
        pass

    # --- comparing snapshots -----------------------------------------------------------------------

    def on_snapshot(self, snap: NodeSnapshot) -> None:
        part = snap.part(GpuPart)
        if part is None:  # collector failed or timed out this tick: nothing to compare
            return
        for g in part.gpus:
            prev = self._prev.get(g.index)
            self._lost(g, prev)
            self._xids(g, prev)
            self._memory_errors(g, prev)
            self._throttling(g, snap.monotonic)
            self._prev[g.index] = g

    def _publish(
        self, g: GpuStats, fault: GpuFault, detail: str, xid: int | None = None, cleared: bool = False
    ) -> None:
        self.published[f"{fault}-cleared" if cleared else fault] += 1
        self._bus.publish(
            GpuFaultEvent(
                fault=fault, gpu=g.index, uuid=g.uuid, model=g.model, detail=detail, xid=xid, cleared=cleared
            )
        )

    def _lost(self, g: GpuStats, prev: GpuStats | None) -> None:
        if not g.up and (prev is None or prev.up):
            self._publish(
                g, GpuFault.LOST, "GPU fell off the bus (NVML: GPU is lost); it needs a reset or a reboot"
            )
        elif g.up and prev is not None and not prev.up:
            self._publish(g, GpuFault.LOST, "GPU answers NVML again", cleared=True)

    def _xids(self, g: GpuStats, prev: GpuStats | None) -> None:
        for xid, count in sorted(g.xid_counts.items()):
            new = count - (prev.xid_counts.get(xid, 0) if prev else 0)
            if new > 0:
                self._publish(
                    g, GpuFault.XID, f"Xid {xid}: {new} new, {count} since the agent started", xid=xid
                )

    def _memory_errors(self, g: GpuStats, prev: GpuStats | None) -> None:
        now, before = g.ecc_uncorrected_total, prev.ecc_uncorrected_total if prev else None
        if now is not None and before is not None and now > before:
            self._publish(g, GpuFault.ECC, f"uncorrectable ECC errors rose from {before} to {now}")
        if g.row_remap_failure and not (prev and prev.row_remap_failure):
            self._publish(g, GpuFault.ECC, "row remapping failed: the GPU needs service")

    def _throttling(self, g: GpuStats, now: float) -> None:
        reasons = g.clocks_event_reasons if g.up else None
        for fault, bits, hold in self._holds:
            st = self._throttle.setdefault((g.index, fault), _Throttle())
            active = 0 if reasons is None else reasons & bits
            if active:
                if st.since is None:
                    st.since = now
                if not st.raised and now - st.since >= hold:
                    st.raised = True
                    self._publish(g, fault, f"{clock_reasons.names(active)} for {now - st.since:.0f}s")
            else:
                if st.raised and st.since is not None:
                    self._publish(g, fault, f"ended after {now - st.since:.0f}s", cleared=True)
                st.since, st.raised = None, False

    # --- faces -------------------------------------------------------------------------------------

    def status(self) -> dict[str, object]:
        lost = [g for g in self._prev.values() if not g.up]
        throttled = sorted((index, fault) for (index, fault), st in self._throttle.items() if st.raised)
        lines = [f"GPU {g.index} ({g.uuid or 'uuid unknown'}) is lost" for g in lost]
        lines += [f"GPU {index}: {fault}" for index, fault in throttled]
        return {
            "lost": [g.index for g in lost],
            "throttled": [{"gpu": index, "fault": fault} for index, fault in throttled],
            "events": dict(self.published),
            "lines": lines,
        }

    def metrics(self) -> Iterable[Metric]:
        fam = CounterMetricFamily(
            "training_node_gpu_fault_events", "GPU fault events published, by fault.", labels=["fault"]
        )
        for fault, n in sorted(self.published.items()):
            fam.add_metric([fault], n)
        if fam.samples:
            yield fam
