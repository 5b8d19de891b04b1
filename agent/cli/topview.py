"""The screen of ``training-node-agent top``: a status (the control socket's JSON), the client-side
history and the view options in, lines of rich ``Text`` out, never more than the height and each cut
to the width. Pure: the clock and the terminal size are arguments, so every layout is tested without
a terminal. The thresholds that decide "spinning" are the classifier's own (its config section and
learned idle power), so a row marked SPIN is what the verdict engine counts as spinning.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.text import Text

from agent.classifier.baselines import Baselines
from agent.classifier.component import ago
from agent.classifier.gpus import GpuClass, gpu_class, work_of
from agent.classifier.samples import GpuSample
from agent.cli.toppanels import History, advice, goodput, inputs, preemption, trainer
from agent.cli.topparts import View, bar, bytes_rate, fit, pct, section, side_by_side, throttle_names
from agent.config.classifier import ClassifierSection
from agent.core.vocabulary import Verdict

WIDE = 160  # from this width the inputs and the trainer/preemption part sit side by side
VERDICT_STYLE: dict[str, str] = {
    Verdict.COMPUTE: "bold green",
    Verdict.DATA: "bold yellow",
    Verdict.NETWORK: "bold yellow",
    Verdict.SYNC_WAIT: "bold magenta",
    Verdict.HOST: "bold yellow",
    Verdict.MIXED: "bold magenta",
    Verdict.IDLE: "bold blue",
}
BOUND = frozenset(
    {Verdict.COMPUTE, Verdict.DATA, Verdict.NETWORK, Verdict.HOST}
)  # shown as "<VERDICT>-BOUND"


# --- the screen ------------------------------------------------------------------------------------


def screen(st: dict[str, Any], hist: History, cfg: ClassifierSection, view: View) -> list[Text]:
    w = view.width
    head = [_header(st, view)]
    if view.help:
        return fit([(head, 1), (_help(), 1)], view.height, w)
    cls = section(st, "classifier")
    try:
        learned = Baselines.from_json(cls.get("learned")) if cls.get("learned") else Baselines()
    except ValueError:
        learned = Baselines()
    verdict_min = 2 if cls.get("candidate") else 1
    gpus = _gpus(st, cfg, learned, w, view.detail)
    # every GPU keeps its row; on a short screen the detail lines give way (and say so)
    if view.detail and view.height is not None and len(gpus) > view.height - verdict_min - 5:
        gpus = _gpus(st, cfg, learned, w, False)
        gpus[0].append("  (detail needs a taller terminal)", style="dim")
    top: list[tuple[list[Text], int]] = [(head, 1), (_verdict(st, cfg), verdict_min), (gpus, len(gpus))]
    left = [(inputs(st, hist, cfg, learned, w if w < WIDE else w // 2 - 1), 2)]
    notices = preemption(st, view)
    right = [
        (notices, len(notices)),  # a notice, its countdown and its checkpoint: all of it, always
        (trainer(st, view), 2),
        (goodput(st.get("goodput")), 1),
        (advice(st.get("advice")), 1),
    ]
    if w < WIDE:
        # the countdown and the episode come before the inputs when the screen is short; under a
        # notice the trainer's side of the handshake (its handler, the request file) does too: a node
        # with many NICs would otherwise fill the screen with idle inputs at the moment that matters
        if _under_notice(st):
            return fit([*top, right[0], right[1], *left, *right[2:]], view.height, w)
        return fit([*top, right[0], *left, *right[1:]], view.height, w)
    below = 6 if _under_notice(st) else 4  # the notice, its episode and the handshake's first lines
    upper = fit(top, None if view.height is None else max(1, view.height - below), w)
    rest = None if view.height is None else view.height - len(upper)
    lw = w // 2 - 1
    return upper + side_by_side(fit(left, rest, lw), fit(right, rest, w - lw - 1), lw)


def _under_notice(st: dict[str, Any]) -> bool:
    return bool(section(st, "preemption").get("active") or section(st, "checkpoint").get("active"))


def _header(st: dict[str, Any], view: View) -> Text:
    snap = st.get("snapshot") or {}
    t = Text()
    t.append("training-node-agent top", style="bold")
    t.append(
        f"  v{st.get('version', '?')}  up {ago(st.get('uptime_seconds') or 0)}  tick {snap.get('seq', '-')}"
    )
    if not st.get("healthy", True):
        t.append(f"  STALLED: {st.get('health_reason')}", style="bold red")
    if view.error:
        t.append(f"  {view.error}", style="bold red reverse")
    t.append(f"  {datetime.fromtimestamp(view.now).strftime('%H:%M:%S')}  h help  q quit", style="dim")
    return t


def _help() -> list[Text]:
    rows = [
        ("q", "quit (the terminal is restored)"),
        ("h", "this help; any key returns"),
        ("g", "per-GPU detail: model, bus, tensor/DRAM activity, clocks,"),
        ("", "PCIe/NVLink rates, ECC, Xid counts, processes"),
        ("", ""),
        ("util", "NVML utilization: some kernel ran. NCCL waiting in a"),
        ("", "collective reads 100% too: it is not work"),
        ("sm/pwr", "real work: SM activity (GPM) or, without GPM, power"),
        ("", "above the learned idle power"),
        ("SPIN", "utilization high, real work low: the GPU waits"),
        ("", "(a collective, a straggler, input)"),
        ("inputs", "rate against capacity (config, link speed or highest seen);"),
        ("", "sparklines: the last minute, scaled to the capacity"),
        ("rtt", "NFS READ round trip against its learned normal (base)"),
    ]
    return [Text.assemble((f"  {k:<7}", "bold"), v) for k, v in rows]


# --- verdict ---------------------------------------------------------------------------------------


def _verdict(st: dict[str, Any], cfg: ClassifierSection) -> list[Text]:
    c = st.get("classifier")
    health = _health(st)
    if not isinstance(c, dict) or "error" in c:
        why = c.get("error") if isinstance(c, dict) else "classifier off"
        return [Text.assemble(("verdict: ", "bold"), (str(why), "dim"), "  ", health)]
    lines: list[Text] = []
    if c.get("verdict") is None:
        why = c.get("held") or "waiting for the first evaluation"
        first = Text.assemble(("verdict pending", "bold"), f" ({why}; {c.get('window_samples', 0)} samples)")
    else:
        label = c["verdict"] + (f"/{c['sub_reason']}" if c.get("sub_reason") else "")
        first = Text(f"{label.upper()}-BOUND" if c["verdict"] in BOUND else label.upper())
        first.stylize(VERDICT_STYLE.get(c["verdict"], "bold"))
        first.append(f" for {ago(c.get('since_seconds') or 0)}")
        if c.get("held"):
            first.append(f" (held: {c['held']})", style="yellow")
    first.append("  ")
    first.append_text(health)
    lines.append(first)
    if c.get("candidate"):
        lines.append(
            Text.assemble(
                ("  pending: ", "bold yellow"),
                f"{c['candidate']} {c.get('candidate_count', 0)}/{cfg.confirmations} confirmations",
                (f"  (this window votes {c.get('vote')})", "dim"),
            )
        )
    lines += [Text(f"  • {r}") for r in (c.get("reasons") or [])[:2]]
    if c.get("hint"):
        lines.append(Text.assemble(("  hint: ", "bold cyan"), c["hint"]))
    scores = c.get("scores") or {}
    if scores:
        s = "  ".join(f"{k} {v:.2f}" for k, v in sorted(scores.items(), key=lambda kv: -kv[1]))
        lines.append(Text(f"  scores {s}  (this window votes {c.get('vote')})", style="dim"))
    return lines


def _health(st: dict[str, Any]) -> Text:
    notes = list(section(st, "classifier").get("health") or [])
    notes += [n for n in section(st, "gpu-health").get("lines") or [] if n not in notes]
    if not notes:
        return Text("GPU health ok", style="green")
    return Text("GPU health: " + "; ".join(notes), style="bold red")


# --- GPUs ------------------------------------------------------------------------------------------


_SOURCE = {"sm": "sm", "power": "pwr"}  # the classifier's work source, as the column says it


def _reading(g: dict[str, Any], util: float | None) -> GpuSample:
    """The status's GPU as the classifier reads it (SM activity, or tensor activity without it)."""
    sm = g.get("sm_active_ratio")
    return GpuSample(
        int(g.get("index") or 0),
        g.get("uuid") or "",
        True,
        util,
        g.get("power_watts"),
        g.get("power_limit_watts"),
        sm if sm is not None else g.get("tensor_active_ratio"),
    )


def real_work(g: dict[str, Any], cfg: ClassifierSection, learned: Baselines) -> tuple[float | None, str]:
    """The GPU's real work 0-1 and its source, the way the classifier measures it (none from
    utilization alone: it cannot tell a spin from work)."""
    work, source = work_of(_reading(g, None), learned, cfg)
    return (work, _SOURCE[source]) if source in _SOURCE else (None, "-")


def spinning(g: dict[str, Any], cfg: ClassifierSection, learned: Baselines) -> bool:
    """Whether spinning is the largest share of the GPU's tick, by the classifier's own split."""
    util = g.get("utilization_ratio")
    if util is None or not g.get("up", True):
        return False
    return gpu_class(_reading(g, float(util)), learned, cfg) is GpuClass.SPINNING


def _gpus(
    st: dict[str, Any], cfg: ClassifierSection, learned: Baselines, width: int, detail: bool
) -> list[Text]:
    snap = st.get("snapshot") or {}
    gpus = snap.get("gpus")
    if not gpus:
        err = ((snap.get("collectors") or {}).get("gpu") or {}).get("error")
        return [Text(f"GPUs: none visible{f' ({err})' if err else ''}", style="dim")]
    comms = {p["pid"]: p.get("comm") or "?" for p in snap.get("training_processes") or []}
    b = min(20, max(5, (width - 64) // 2))
    out = [Text(f"GPUs {len(gpus)}  driver {snap.get('driver_version') or '?'}", style="bold")]
    for g in gpus:
        out.append(_gpu_row(g, b, cfg, learned, comms))
        if detail:
            out.append(_gpu_detail(g, comms))
    return out


def _gpu_row(
    g: dict[str, Any], b: int, cfg: ClassifierSection, learned: Baselines, comms: dict[int, str]
) -> Text:
    t = Text(f"{g['index']:>2} ")
    if not g.get("up", True):
        t.append(f"LOST  {g.get('uuid') or ''}", style="bold red reverse")
        return t
    util = g.get("utilization_ratio")
    work, src = real_work(g, cfg, learned)
    spin = spinning(g, cfg, learned)
    t.append("util ")
    t.append_text(bar(util, b, "cyan"))
    t.append(f" {pct(util)}  {src:<3} ")
    t.append_text(bar(work, b, "red" if spin else "green"))
    t.append(f" {pct(work)}")
    t.append(" SPIN" if spin else "     ", style="bold yellow reverse" if spin else "")
    used, total = g.get("memory_used_bytes"), g.get("memory_total_bytes")
    t.append(f" {used / 2**30:>3.0f}/{total / 2**30:.0f}G" if used is not None and total else "   -/-G ")
    p, lim = g.get("power_watts"), g.get("power_limit_watts")
    t.append(f" {p:>4.0f}/{lim:.0f}W" if p is not None and lim else "     -/-W")
    temp = g.get("temperature_celsius")
    t.append(f" {temp:>3.0f}C" if temp is not None else "   -C", style="red" if (temp or 0) >= 85 else "")
    names = throttle_names(g.get("clocks_event_reasons") or 0)
    if names:
        t.append(" " + ",".join(names), style="yellow")
    pids = [p["pid"] for p in g.get("processes") or []]
    if pids:
        t.append("  " + " ".join(f"{pid} {comms.get(pid, '')}".rstrip() for pid in pids), style="dim")
    return t


def _gpu_detail(g: dict[str, Any], comms: dict[int, str]) -> Text:
    parts = [g.get("model") or "?", g.get("pci_bus_id") or "?"]
    for key, name in (("tensor_active_ratio", "tensor"), ("dram_active_ratio", "dram")):
        if g.get(key) is not None:
            parts.append(f"{name} {pct(g[key]).strip()}")
    if g.get("sm_clock_hertz"):
        parts.append(f"{g['sm_clock_hertz'] / 1e6:.0f} MHz")
    for bus in ("pcie", "nvlink"):
        rx, tx = g.get(f"{bus}_rx_bytes_per_second"), g.get(f"{bus}_tx_bytes_per_second")
        if rx is not None or tx is not None:
            parts.append(f"{bus} rx {bytes_rate(rx)} tx {bytes_rate(tx)}")
    if g.get("ecc_uncorrected_total"):
        parts.append(f"ECC uncorrected {g['ecc_uncorrected_total']}")
    xids = g.get("xid_counts") or {}
    if xids:
        parts.append("Xid " + ",".join(f"{k}x{v}" for k, v in sorted(xids.items())))
    for p in g.get("processes") or []:
        mem = p.get("used_memory_bytes")
        parts.append(
            f"pid {p['pid']} {comms.get(p['pid'], '')} {mem / 2**30:.1f}G" if mem else f"pid {p['pid']}"
        )
    return Text("     " + " · ".join(parts), style="dim")


# --- inputs ----------------------------------------------------------------------------------------


# --- trainer, preemption, goodput --------------------------------------------------------------------
