"""The numbers that decided a verdict, as short sentences an operator can check (pure)."""

from __future__ import annotations

from typing import NamedTuple

from agent.classifier.families import CAPACITIES
from agent.classifier.features import Features
from agent.classifier.loads import Load, Signal
from agent.classifier.scores import Scores
from agent.classifier.shapes import SHAPES
from agent.classifier.slowgpu import SlowGpu
from agent.classifier.traffic import Traffic
from agent.core.vocabulary import DataSubReason, HostSubReason, Verdict


class Second(NamedTuple):
    """The cause a compute verdict still loses a share of the time to."""

    verdict: str
    sub_reason: str | None
    share: float

    @property
    def label(self) -> str:
        return f"{self.verdict}/{self.sub_reason}" if self.sub_reason else self.verdict


def rate(v: float) -> str:
    for unit in ("B/s", "KB/s", "MB/s", "GB/s"):
        if v < 999.5:
            return f"{v:.3g} {unit}"
        v /= 1000
    return f"{v:.3g} TB/s"


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms"


_KIND = {c.kind: c.label for c in CAPACITIES}
_SOURCE = {"config": "", "learned": "~", "link": "", "unknown": ""}


def load_text(x: Load, verb: str, when: str) -> str:
    """``disk vda read 140 MB/s on average = 100% of ~200 MB/s capacity (learned) over the 70% of
    the time the GPUs starved``: the mean, and how much of the capacity it is per second of waiting."""
    text = f"{_KIND[x.kind]} {x.name} {verb} {rate(x.rate)} on average"
    if x.capacity:
        learned = " (learned)" if x.source == "learned" else ""
        used = f"= {pct(x.utilization)} of" if x.utilization is not None else "against"
        text += f" {used} {_SOURCE[x.source]}{rate(x.capacity)} capacity{learned}"
        if x.share > 0:
            text += f" over the {pct(x.share)} of the time the GPUs {when}"
    else:
        text += " (capacity unknown: set it in [classifier])"
    return text


def traffic_text(x: Traffic) -> str:
    """``NIC eth0 moved 6.1 MB/s while the GPUs waited (steady in 92% of the waits; 14x its rate while
    they worked) = 97% of the ~6.3 MB/s it has carried at most (reported 1.25 GB/s: an upper bound)``"""
    text = (
        f"{_KIND[x.kind]} {x.name} moved {rate(x.rate_wait)} while the GPUs waited "
        f"(steady in {pct(x.steady)} of the waits, {rate(x.level)} as the ceiling reads it"
    )
    c = x.contrast
    if c is not None:
        text += (
            f"; {c:.0f}x its rate while they worked" if c != float("inf") else "; nothing while they worked"
        )
    seen = "it has carried at most" if x.ceiling_source == "learned" else "this window's plateau"
    text += f") = {pct(x.utilization)} of the ~{rate(x.ceiling)} {seen}"
    if x.busy >= 0.5:
        text += f"; its bytes need that ceiling {pct(x.busy)} of the time the GPUs waited"
    if x.link:
        text += f" (reported speed {rate(x.link)}: an upper bound)"
    return text


def signal_text(s: Signal, when: str) -> str:
    if s.what == "iowait":
        return f"iowait {pct(s.value)} of CPU time while the GPUs {when}"
    if s.what == "psi_io":
        return f"tasks stalled on I/O (PSI io) {pct(s.value)} of the time the GPUs {when}"
    if s.what == "disk_busy":
        return f"disk {s.name} busy {pct(s.value)} of the time the GPUs {when}"
    if s.what == "nfs_rtt":
        base = f" (baseline {ms(s.baseline)})" if s.baseline else " (no baseline yet)"
        return f"NFS {s.name} READ RTT {ms(s.value)}{base}"
    if s.what == "cnp":
        return f"RDMA {s.name} congestion: {s.value:.0f} CNP/s while the GPUs {when}"
    return f"RDMA {s.name} port_xmit_wait {s.value:.3g} ticks/s while the GPUs {when}"


def gpu_line(f: Features) -> str:
    if f.util_mean is None:
        return "no GPU readings in the window (GPU collector absent or failing)"
    text = f"GPU busy {pct(f.util_mean)} (p5 {pct(f.util_p5)}, p95 {pct(f.util_p95)})"
    what = {
        "sm": "SM activity",
        "power": "power above idle",
        "power+sm": "SM activity / power",
        "utilization": "utilization only: no GPM or power reading",
    }.get(f.work_source, f.work_source)
    return text + f", real work {pct(f.work_mean)} ({what})"


def _pressing(items, limit: int = 2) -> list:
    return [x for x in items if x.pressure > 0][:limit]


def explain(
    f: Features, s: Scores, verdict: str, sub_reason: str | None, second: Second | None = None
) -> tuple[str, ...]:
    """Reasons for ``verdict``, most decisive first; every one carries its numbers. ``second`` is the
    cause a compute verdict still loses a share of the time to."""
    out = [gpu_line(f)]
    if verdict == Verdict.COMPUTE:
        out.append(f"GPUs doing real work {pct(f.working_share)} of the time")
        if f.starved_share or f.spin_share:
            out.append(f"starved {pct(f.starved_share)}, spinning {pct(f.spin_share)} of the time")
        if second is not None:
            out.append(f"{second.label} still costs {pct(second.share)} of the time:")
            # past the GPU line (and a data or network verdict's line of shares): what decided it
            skip = 1 if second.verdict == Verdict.HOST else 2
            out += ["  " + x for x in explain(f, s, second.verdict, second.sub_reason)[skip : skip + 2]]
    elif verdict == Verdict.HOST and sub_reason in SHAPES:
        out += SHAPES[HostSubReason(sub_reason)].reasons(f)
    elif verdict == Verdict.DATA:
        out.append(f"GPUs starved (low utilization, no real work) {pct(f.starved_share)} of the time")
        if f.host.data_share is not None:
            told = pct(f.host.data_share)
            out.append(f"the training loop waited for its next batch {told} of the time (from the trainer)")
        if sub_reason == DataSubReason.CPU:
            out += _cpu_text(f)
        elif sub_reason == DataSubReason.NETWORK_INPUT:
            out += _streamed_text(f)
        else:
            out += [signal_text(x, "starved") for x in _pressing(f.storage_signals)]
            if f.storage:  # the busiest reader, pressing or not: what the stalls were waiting for
                out.insert(2, load_text(f.storage[0], "read", "starved"))
            if f.trainer_read is not None:
                out.append(f"training processes read {rate(f.trainer_read)} on average")
            if f.trainer_blocked and f.starved_share:
                out.append(
                    "a training process blocked on I/O (uninterruptible) "
                    f"{pct(min(1.0, f.trainer_blocked / f.starved_share))} of the time the GPUs starved"
                )
    elif verdict == Verdict.NETWORK:
        out.append(
            f"GPUs waiting {pct(f.spin_share + f.starved_share)} of the time "
            f"(spinning {pct(f.spin_share)}: utilization high at low power/SM activity, as in NCCL)"
        )
        if f.traffic and f.traffic[0].pressure > (f.links_wait[0].pressure if f.links_wait else 0.0):
            out.append(traffic_text(f.traffic[0]))
        else:
            out += [load_text(x, "moved", "waited") for x in f.links_wait[:1]]
        out += [signal_text(x, "waited") for x in _pressing(f.congestion)]
    elif verdict == Verdict.SYNC_WAIT:
        out.append(
            f"GPUs spinning {pct(f.spin_share)} of the time: utilization {pct(f.spin_util)} "
            f"with {pct(f.spin_work)} real work (a collective waiting)"
        )
        if f.traffic:
            out.append("network quiet meanwhile: busiest " + traffic_text(f.traffic[0]))
        elif f.links_spin:
            top = f.links_spin[0]
            out.append("network quiet meanwhile: busiest " + load_text(top, "moved", "spun"))
        else:
            out.append("network quiet meanwhile: no NIC or RDMA traffic")
    elif verdict == Verdict.IDLE:
        if f.trainers == 0:
            out.append("no training processes")
        elif f.trainers:
            out.append(f"training processes present ({f.trainer_label}) but neither GPUs nor inputs are busy")
    if (
        verdict in (Verdict.IDLE, Verdict.MIXED, Verdict.DATA)
        and f.io_pressure > 0
        and f.storage_pressure < f.io_pressure
    ):
        out.append(
            f"I/O pressure on the node ({_top_signal(f)}) counted {pct(f.storage_pressure / f.io_pressure)}: "
            + (
                f"a training process was running or waiting to run {pct(f.cpu_busiest)} of the time"
                if (f.cpu_busiest or 0.0) >= 0.6
                else f"the training processes read only {rate(f.trainer_read or 0.0)}"
                + (f", blocked on I/O {pct(f.trainer_blocked)} of the time" if f.trainer_blocked else "")
            )
        )
    if verdict == Verdict.MIXED:
        ranked = sorted(s.by_class.items(), key=lambda kv: kv[1], reverse=True)
        out.append("no class clearly wins: " + ", ".join(f"{k} {v:.2f}" for k, v in ranked[:3]))
    if verdict in (Verdict.COMPUTE, Verdict.SYNC_WAIT):
        out[1:1] = [slow_gpu_text(x) for x in f.slow_gpus]  # what sets the pace goes first
    if verdict not in (Verdict.COMPUTE, Verdict.IDLE) and 0 < len(f.waiting_gpus) < f.gpus:
        out.append("only some GPUs wait: " + ",".join(str(i) for i in f.waiting_gpus))
    return tuple(out)


def slow_gpu_text(x: SlowGpu) -> str:
    """``GPU 3 works 97% of the time while its 7 peers work 62% and wait for it 35% (spinning in
    collectives); GPU 3 at 1245 of 1980 MHz, hardware slowdown 60% of the time``"""
    text = (
        f"GPU {x.gpu} works {pct(x.working)} of the time while its {x.peers} peers work "
        f"{pct(x.peers_working)} and wait for it {pct(x.peers_spinning)} (spinning in collectives); "
        f"GPU {x.gpu}"
    )
    if x.clock and x.clock_max:
        text += f" at {x.clock / 1e6:.0f} of {x.clock_max / 1e6:.0f} MHz"
    if x.under:
        under = ", ".join(f"{n} {pct(share)}" for n, share in x.under[:2])
        return text + ("," if x.clock and x.clock_max else ":") + f" {under} of the time"
    return text + ": no clocks event reason: check its PCIe link, power limit and NVLink (status)"


def streamed_text(x: Traffic) -> str:
    """``NIC eth0 moved 6.1 MB/s while the GPUs starved (steady in 96% of that time) = 98% of the
    ~6.2 MB/s this window's plateau (reported speed 1.25 GB/s: an upper bound)``"""
    seen = "it has carried at most" if x.ceiling_source == "learned" else "this window's plateau"
    text = (
        f"{_KIND[x.kind]} {x.name} moved {rate(x.rate_starved)} while the GPUs starved (steady in "
        f"{pct(x.steady_starved)} of that time) = {pct(x.input_utilization)} of the ~{rate(x.ceiling)} {seen}"
    )
    if x.link:
        text += f" (reported speed {rate(x.link)}: an upper bound)"
    return text


def _streamed_text(f: Features) -> list[str]:
    out = []
    if f.streamed is not None:
        out.append("input streamed over the network: " + streamed_text(f.streamed))
    if f.trainer_nonblock_read is not None:
        out.append(
            f"training processes read {rate(f.trainer_nonblock_read)} that no disk or NFS served "
            "(FUSE mounts, the page cache; a socket's recv() is not counted there, the NIC is)"
        )
    if f.cpu_busiest is not None:
        out.append(
            f"the busiest training process or worker ran (or waited to run) {pct(f.cpu_busiest)} of the time"
        )
    return out


def _top_signal(f: Features) -> str:
    if f.storage_signals:
        return signal_text(f.storage_signals[0], "starved")
    return load_text(f.storage[0], "read", "starved") if f.storage else "-"


def _cpu_text(f: Features) -> list[str]:
    if f.cpu_saturation is None and f.cpu_busiest is None:
        return ["trainer CPU not measured"]
    out = []
    starved = f"while the GPUs starved {pct(f.starved_share)} of the time"
    if f.cpu_workers == 0 and (f.cpu_pegged_level is not None or f.cpu_decoding is not None):
        # pegged over the window, or (cpu_decoding) over the time its GPUs starved
        busy = f.cpu_pegged_level if f.cpu_decoding is None else f.cpu_busiest
        line = (
            f"the training process decodes every batch itself (DataLoader num_workers=0): {f.trainer_label} "
            f"busy {pct(busy)} of a core (running or waiting to run)"
        )
        if f.cpu_synchronous:
            line += f" {starved}: it decodes while they wait"
        out.append(line)
    elif f.cpu_synchronous:
        out.append(
            f"the busiest of {f.cpu_workers} input workers busy {pct(f.cpu_busiest)} of a core (running or "
            f"waiting to run) {starved}: it works only while they wait, the pipeline does not run ahead"
        )
    elif f.cpu_pegged_level is not None:
        ranks = f" ({f.cpu_ranks} training processes)" if f.cpu_ranks > 1 else ""
        runnable = f.cpu_pegged * f.cpu_pegged_level
        if f.cpu_allowed and runnable > f.cpu_allowed * 1.05:
            # more runnable workers than cores: each was runnable all along, not on a core of its own
            out.append(
                f"{f.cpu_pegged:.0f} of {f.cpu_workers} data-loader workers{ranks} runnable "
                f"{pct(f.cpu_pegged_level)} of the time each (running or waiting to run), sharing "
                f"{f.cpu_allowed:.1f} allowed cores"
                + (f" that were {pct(f.cpu_saturation)} busy" if f.cpu_saturation is not None else "")
            )
        else:
            out.append(
                f"{f.cpu_pegged:.0f} of {f.cpu_workers} data-loader workers{ranks} busy "
                f"{pct(f.cpu_pegged_level)} of a core each (running or waiting to run)"
            )
    if f.cpu_saturation is not None:
        text = (
            f"trainer {f.trainer_label} using {f.cpu_cores or 0:.2f} of {f.cpu_allowed or 0:.2f} allowed "
            f"cores ({pct(f.cpu_saturation)})"
        )
        if f.cpu_idle_cores is not None:
            text += f"; {f.cpu_idle_cores:.1f} allowed cores idle"
        out.append(text)
    return out
