"""GPU faults as events: each snapshot is compared with the one before and a :class:`GpuFaultEvent`
is published for a new Xid error, a GPU that fell off the bus (and its return), a rise in
uncorrectable ECC errors or a failed row remap, and a condition that lasts longer than its hold (with
a ``cleared`` event when it ends): thermal or power throttling, a PCIe link trained down, NVLink
links down, a power limit below the default, corrected ECC errors or NVLink replays and recoveries
rising faster than their rate (``rising.py``), NVML calls for the GPU that do not return. Xids also
come from the kernel log (``kernel_log.py``), counted once with NVML's (``xids.py``), in the events
and in ``training_node_gpu_xid_errors_total`` alike.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog
from prometheus_client.core import CounterMetricFamily, Metric

from agent.context import Context
from agent.core.component import HasMetrics, HasStatus
from agent.core.events import GpuFaultEvent
from agent.core.vocabulary import GpuFault
from agent.faults.kernel_log import KernelXidWatch
from agent.faults.rising import RisingCount
from agent.faults.xids import XidSource, XidTally
from agent.snapshot import NodeSnapshot
from agent.sources.gpu import reasons as clock_reasons
from agent.sources.gpu.kmsg import KernelXid, bus_key
from agent.sources.gpu.part import GpuPart, GpuStats, NvlinkCounter

log = structlog.get_logger("gpu-health")


@dataclass
class _Held:
    since: float | None = None  # monotonic time the condition was first seen in this stretch
    raised: bool = False
    evidence: str = ""  # what the last snapshot showed of it


# a condition of one GPU: what shows it (its evidence), or None while it does not hold
Condition = Callable[[GpuStats], str | None]
# the faults that throttle clocks (the status's "throttled"); the others degrade the GPU ("degraded")
THROTTLES = frozenset({GpuFault.THERMAL_THROTTLE, GpuFault.POWER_THROTTLE})
XID_HELP = (
    "Xid critical errors since the agent started, each once per GPU, from NVML's events and the kernel"
    " log's NVRM: Xid lines; gpu is the line's PCI address where NVML had not named the GPU."
)


def _reasons(bits: int) -> Condition:
    def active(g: GpuStats) -> str | None:
        on = (g.clocks_event_reasons or 0) & bits
        return clock_reasons.names(on) if on else None

    return active


def pcie_degraded(g: GpuStats) -> str | None:
    """Width below its max, or generation below its max while a kernel runs: an idle GPU's link drops
    to a lower generation to save power (nvidia-smi shows it), and trains up again under load."""
    gen, gen_max, width, width_max = (
        g.pcie_link_generation,
        g.pcie_link_generation_max,
        g.pcie_link_width,
        g.pcie_link_width_max,
    )
    narrow = width is not None and width_max is not None and width < width_max
    slow = gen is not None and gen_max is not None and gen < gen_max and (g.utilization or 0) > 0
    if not (narrow or slow):
        return None
    return f"PCIe link Gen{gen or '?'} x{width or '?'} of Gen{gen_max or '?'} x{width_max or '?'}"


def nvlink_down(g: GpuStats) -> str | None:
    active, present = g.nvlink_links_active, g.nvlink_links
    if active is None or not present or active >= present:
        return None
    return f"{present - active} of {present} NVLink links down"


def power_limit_low(g: GpuStats) -> str | None:
    limit, default = g.power_limit_watts, g.power_default_limit_watts
    if limit is None or default is None or limit >= default - 0.5:  # NVML counts mW: not a rounding
        return None
    return f"power limit {limit:.0f} W, below the default {default:.0f} W"


def row_remap_pending(g: GpuStats) -> str | None:
    if not g.row_remap_pending:
        return None
    # the GPU runs on its spare rows meanwhile; the remap takes effect at the next reset
    return "memory rows retired, remap pending: reset the GPU (drain it first)"


def _ecc_corrected(g: GpuStats) -> int | None:
    return g.ecc_corrected_total


def _nvlink_retries(g: GpuStats) -> int | None:
    """Replays and recoveries, all links together: a link that retransmits or retrains. CRC errors
    alone are what replays repair (NVIDIA's DCGM counts CRC errors only from 100 a second)."""
    errors = g.nvlink_errors
    present = [errors[c] for c in (NvlinkCounter.REPLAY, NvlinkCounter.RECOVERY) if c in errors]
    return sum(present) if present else None


def unresponsive(g: GpuStats) -> str | None:
    if g.unresponsive_seconds is None:
        return None
    return "its NVML calls do not return (the driver may be wedged; the kernel log's Xids still count)"


def gpus_missing(snap: NodeSnapshot) -> str | None:
    """Why the snapshot lacks GPUs the node has (the collector failing, GPUs that hang or are lost), or
    None: /healthz says "degraded" with it, never "ok" with GPUs missing."""
    st = snap.collectors.get("gpu")
    if st is not None and not st.success and not st.absent:
        return f"GPU collector failing: {st.error}"
    part = snap.part(GpuPart)
    if part is None:
        return None
    hung = [str(g.index) for g in part.gpus if g.hung]
    lost = [str(g.index) for g in part.gpus if g.lost]
    words = [f"GPU {', '.join(hung)} unresponsive (NVML calls do not return)"] if hung else []
    words += [f"GPU {', '.join(lost)} lost"] if lost else []
    return "; ".join(words) or None


class GpuHealth(HasMetrics, HasStatus):
    name = "gpu-health"

    def __init__(self, ctx: Context) -> None:
        self._bus = ctx.bus
        cfg = ctx.cfg.gpu
        window = cfg.error_rate_window
        self._rising = (
            RisingCount(_ecc_corrected, "corrected ECC errors", window, cfg.ecc_corrected_per_hour),
            RisingCount(_nvlink_retries, "NVLink replays and recoveries", window, cfg.nvlink_errors_per_hour),
        )
        ecc_rising, nvlink_rising = self._rising
        self._holds: tuple[tuple[GpuFault, Condition, float], ...] = (
            (GpuFault.THERMAL_THROTTLE, _reasons(clock_reasons.THERMAL), cfg.thermal_throttle_hold),
            (GpuFault.POWER_THROTTLE, _reasons(clock_reasons.POWER), cfg.power_throttle_hold),
            (GpuFault.PCIE_DEGRADED, pcie_degraded, cfg.pcie_degraded_hold),
            (GpuFault.NVLINK_DOWN, nvlink_down, cfg.nvlink_down_hold),
            (GpuFault.POWER_LIMIT_LOW, power_limit_low, cfg.power_limit_hold),
            (GpuFault.ECC_CORRECTED_RISING, ecc_rising.condition, cfg.ecc_corrected_hold),
            (GpuFault.NVLINK_ERRORS, nvlink_rising.condition, cfg.nvlink_errors_hold),
            (GpuFault.ROW_REMAP_PENDING, row_remap_pending, cfg.row_remap_pending_hold),
            (GpuFault.UNRESPONSIVE, unresponsive, cfg.unresponsive_hold),
        )
        # by index: a GPU lost since start has no UUID until it answers again
        self._prev: dict[int, GpuStats] = {}
        self._held: dict[tuple[int, GpuFault], _Held] = {}
        self.published: Counter[str] = Counter()
        self._tally = XidTally()  # NVML's events and the kernel log's lines: one event per Xid
        # the GPUs by PCI address, learned while NVML answers: the kernel log names a GPU by it
        self._buses: dict[tuple[int, int, int], int] = {}
        self.unmapped_xids = 0
        self.xids_by_address = 0
        # the Xid counter: what the events count, by GPU index, or by the line's address where NVML
        # had not named the GPU (it stays there: the GPU named later does not count it again)
        self._xid_errors: Counter[tuple[int, int]] = Counter()
        self._xid_errors_by_address: Counter[tuple[str, int]] = Counter()
        self._nvml_failing = False  # the GPU collector fails (not absent): NVML there but not answering
        # Xids raised by PCI address before NVML named the GPU: counted against it once it does
        self._unmapped: defaultdict[tuple[int, int, int], Counter[int]] = defaultdict(Counter)
        self._kernel_log = (
            KernelXidWatch(cfg.kernel_log, ctx.kernel_log, self.on_kernel_xid) if cfg.kernel_log else None
        )
        ctx.snapshot_listeners.append(self.on_snapshot)

    async def run(self) -> None:
        if self._kernel_log is not None:
            await self._kernel_log.run()
        await asyncio.Event().wait()  # all other work happens in on_snapshot

    async def stop(self) -> None:
        pass

    # --- comparing snapshots -----------------------------------------------------------------------

    def on_snapshot(self, snap: NodeSnapshot) -> None:
        st = snap.collectors.get("gpu")
        self._nvml_failing = st is not None and not st.success and not st.absent
        part = snap.part(GpuPart)
        if part is None:  # collector failed or timed out this tick: nothing to compare
            return
        for g in part.gpus:
            prev = self._prev.get(g.index)
            if g.pci_bus_id and (prev is None or prev.pci_bus_id != g.pci_bus_id):
                self._learn_address(g.index, g.pci_bus_id)
            self._lost(g, prev)
            self._xids(g, prev)
            self._memory_errors(g, prev)
            for rising in self._rising:
                rising.observe(g, snap.monotonic)
            self._conditions(g, snap.monotonic)
            self._prev[g.index] = g

    def _learn_address(self, index: int, pci_bus_id: str) -> None:
        """Parsed when NVML first names the GPU, not at every tick: the address is fixed for a boot."""
        key = bus_key(pci_bus_id)
        if key is None:
            return
        self._buses[key] = index
        for xid, n in self._unmapped.pop(key, {}).items():  # raised by address already
            self._tally.seen(index, xid, XidSource.KERNEL_LOG, n)

    def _publish(
        self, g: GpuStats, fault: GpuFault, detail: str, xid: int | None = None, cleared: bool = False
    ) -> None:
        self._emit(
            GpuFaultEvent(
                fault=fault,
                gpu=g.index,
                uuid=g.uuid,
                model=g.model,
                detail=detail,
                xid=xid,
                cleared=cleared,
                pci_bus_id=g.pci_bus_id or "",
            )
        )

    def _emit(self, ev: GpuFaultEvent) -> None:
        self.published[f"{ev.fault}-cleared" if ev.cleared else ev.fault] += 1
        self._bus.publish(ev)

    def _lost(self, g: GpuStats, prev: GpuStats | None) -> None:
        if g.hung or (prev is not None and prev.hung):
            return  # a call that hangs is not a GPU that fell off the bus: _unresponsive says it
        if not g.up and (prev is None or prev.up):
            self._publish(
                g, GpuFault.LOST, "GPU fell off the bus (NVML: GPU is lost); it needs a reset or a reboot"
            )
        elif g.up and prev is not None and not prev.up:
            self._publish(g, GpuFault.LOST, "GPU answers NVML again", cleared=True)

    def _xids(self, g: GpuStats, prev: GpuStats | None) -> None:
        for xid, count in sorted(g.xid_counts.items()):
            new = count - (prev.xid_counts.get(xid, 0) if prev else 0)
            unseen = self._tally.seen(g.index, xid, XidSource.NVML, new) if new > 0 else 0
            if unseen:  # those the kernel log had already counted are not counted again
                self._xid_errors[(g.index, xid)] += unseen
                self._publish(
                    g, GpuFault.XID, f"Xid {xid}: {new} new, {count} since the agent started", xid=xid
                )

    def on_kernel_xid(self, x: KernelXid) -> None:
        index = self._buses.get(x.bus)
        g = self._prev.get(index) if index is not None else None
        if g is None and (self._buses or not self._nvml_failing):
            # NVML named this node's GPUs and not this one (a GPU passed to a VM, or not ours), or
            # there is no NVML: counted, not raised
            self.unmapped_xids += 1
            log.warning("Xid in the kernel log for a GPU NVML does not name", address=x.address, xid=x.xid)
            return
        if g is None:
            # NVML has failed since the agent started (a driver that hung before it first answered):
            # the driver's line is still this node's GPU, raised by its address
            self.xids_by_address += 1
            self._unmapped[x.bus][x.xid] += 1
            self._xid_errors_by_address[(x.address, x.xid)] += 1
            log.warning(
                "GPU Xid error in the kernel log, at an address NVML has not named",
                address=x.address,
                xid=x.xid,
                line=x.text,
            )
            self._emit(
                GpuFaultEvent(
                    fault=GpuFault.XID,
                    gpu=None,
                    uuid="",
                    model="",
                    xid=x.xid,
                    pci_bus_id=x.address,
                    detail=f"Xid {x.xid} (kernel log, a GPU NVML has not named): {x.text}",
                )
            )
            return
        log.warning("GPU Xid error in the kernel log", gpu=g.index, uuid=g.uuid, xid=x.xid, line=x.text)
        if self._tally.seen(g.index, x.xid, XidSource.KERNEL_LOG):
            self._xid_errors[(g.index, x.xid)] += 1
            self._publish(g, GpuFault.XID, f"Xid {x.xid} (kernel log): {x.text}", xid=x.xid)

    def _memory_errors(self, g: GpuStats, prev: GpuStats | None) -> None:
        now, before = g.ecc_uncorrected_total, prev.ecc_uncorrected_total if prev else None
        if now is not None and before is not None and now > before:
            self._publish(g, GpuFault.ECC, f"uncorrectable ECC errors rose from {before} to {now}")
        if g.row_remap_failure and not (prev and prev.row_remap_failure):
            self._publish(g, GpuFault.ECC, "row remapping failed: the GPU needs service")

    def _conditions(self, g: GpuStats, now: float) -> None:
        """Each condition raises once it has held for its hold, and clears when it ends; a GPU that is
        down shows none of them but the one that says it does not answer."""
        held = self._held
        for fault, condition, hold in self._holds:
            # every GPU, every condition, every tick: a state is made only once a condition holds
            evidence = condition(g) if g.up or fault == GpuFault.UNRESPONSIVE else None
            st = held.get((g.index, fault))
            if evidence is None:
                if st is not None and st.since is not None:
                    if st.raised:
                        self._publish(g, fault, f"ended after {now - st.since:.0f}s", cleared=True)
                    st.since, st.raised, st.evidence = None, False, ""
                continue
            if st is None:
                st = held[(g.index, fault)] = _Held()
            st.evidence = evidence
            if st.since is None:
                st.since = now
            if not st.raised and now - st.since >= hold:
                st.raised = True
                self._publish(g, fault, f"{evidence} for {now - st.since:.0f}s")

    # --- faces -------------------------------------------------------------------------------------

    def status(self) -> dict[str, object]:
        gpus = self._prev.values()
        hung = sorted((g.index, g.unresponsive_seconds or 0.0) for g in gpus if g.hung)
        lost = [g for g in gpus if g.lost]
        raised = sorted(
            (index, fault, st.evidence)
            for (index, fault), st in self._held.items()
            if st.raised and fault != GpuFault.UNRESPONSIVE  # listed with the lost ones above
        )
        lines = [f"GPU {g.index} ({g.uuid or 'uuid unknown'}) is lost" for g in lost]
        lines += [f"GPU {index} does not answer NVML (a call running {s:.0f}s)" for index, s in hung]
        lines += [f"GPU {index}: {fault}" for index, fault, _ in raised if fault in THROTTLES]
        lines += [f"GPU {i}: {fault}: {evidence}" for i, fault, evidence in raised if fault not in THROTTLES]
        return {
            "lost": [g.index for g in lost],
            "unresponsive": [index for index, _ in hung],
            "throttled": [{"gpu": index, "fault": fault} for index, fault, _ in raised if fault in THROTTLES],
            "degraded": [
                {"gpu": index, "fault": fault, "evidence": evidence}
                for index, fault, evidence in raised
                if fault not in THROTTLES
            ],
            "events": dict(self.published),
            "xids_seen": self._tally.by_source(),
            "kernel_log": {
                **(self._kernel_log.status() if self._kernel_log else {"path": None}),
                "unmapped": self.unmapped_xids,
                "by_address": self.xids_by_address,
            },
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
        xids = CounterMetricFamily(
            "training_node_gpu_xid_errors", XID_HELP, labels=["gpu", "uuid", "model", "xid"]
        )
        for (index, xid), n in sorted(self._xid_errors.items()):
            g = self._prev.get(index)  # always there: counted from its stats, or mapped to them
            xids.add_metric([str(index), g.uuid if g else "", g.model if g else "", str(xid)], n)
        for (address, xid), n in sorted(self._xid_errors_by_address.items()):
            xids.add_metric([address, "", "", str(xid)], n)
        if xids.samples:
            yield xids
