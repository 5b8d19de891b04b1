"""The lower panels of ``top``: inputs (with the client-side history behind their sparklines),
trainer, preemption and goodput. Each is a pure function of the status and the view."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from rich.text import Text

from agent.classifier.baselines import Baselines, capacity
from agent.classifier.component import ago
from agent.classifier.families import CAPACITIES
from agent.cli.topparts import View, bar, bytes_rate, countdown, pct, section, sparkline
from agent.config.classifier import ClassifierSection
from agent.core.vocabulary import SIGNAL_READY, HandlerState
from agent.sources.jobs.status import describe as describe_job

HISTORY = 60  # one sample a second: the last minute


class History:
    """The last minute of each input's throughput, kept by the client: the agent serves
    only the latest snapshot, and one sample per refresh is all a sparkline needs."""

    def __init__(self, size: int = HISTORY) -> None:
        self.size = size
        self.series: dict[str, deque[float]] = {}
        self._seq: int | None = None

    def get(self, key: str) -> Sequence[float]:
        return self.series.get(key, ())

    def record(self, st: dict[str, Any]) -> None:
        summarized = st.get("snapshot") or {}
        if summarized.get("seq") is not None and summarized.get("seq") == self._seq:
            return  # the agent has not sampled since the last refresh
        self._seq = summarized.get("seq")
        for key, value in input_values(summarized):
            q = self.series.setdefault(key, deque(maxlen=self.size))
            q.append(value)


def input_values(summarized: dict[str, Any]) -> Iterable[tuple[str, float]]:
    for name, d in (summarized.get("disks") or {}).items():
        yield f"disks:{name}", d.get("read_bytes_per_second") or 0.0
    for name, d in (summarized.get("nfs") or {}).items():
        yield f"nfs:{name}", d.get("read_bytes_per_second") or 0.0
    for kind in ("nics", "rdma"):
        for name, d in (summarized.get(kind) or {}).items():
            yield (
                f"{kind}:{name}",
                max(d.get("rx_bytes_per_second") or 0.0, d.get("tx_bytes_per_second") or 0.0),
            )


def inputs(
    st: dict[str, Any], hist: History, cfg: ClassifierSection, learned: Baselines, w: int
) -> list[Text]:
    summarized = st.get("snapshot") or {}
    rows: list[tuple[float, Text]] = []
    nw = 12 if w < 100 else 20
    for c in CAPACITIES:
        key, kind = c.status_key, c.kind
        for name, d in (summarized.get(key) or {}).items():
            link = d.get("speed_bytes") or d.get("rate_bytes")
            cap, _ = capacity(kind, name, learned, cfg, link)
            if c.side == "storage":
                now = d.get("read_bytes_per_second") or 0.0
                rate = f"read {bytes_rate(now)}"
            else:
                rx, tx = d.get("rx_bytes_per_second") or 0.0, d.get("tx_bytes_per_second") or 0.0
                now = max(rx, tx)  # a full-duplex link: each direction has the whole capacity
                rate = f"rx {bytes_rate(rx)} tx {bytes_rate(tx)}"
            t = Text(f"{kind:<4} {_short(name, nw):<{nw}} ")
            t.append(f"{rate:<26}")
            t.append(f" of {bytes_rate(cap) if cap else '?':<10}", style="dim")
            t.append(" ")
            t.append_text(bar(now / cap if cap else None, 6, "cyan"))
            if kind == "nfs":
                t.append_text(_rtt(d.get("read_rtt_seconds"), learned.nfs_rtt.get(name)))
            series = hist.get(f"{key}:{name}")
            spark = min(HISTORY, w - t.cell_len - 1)  # the last minute, or as much of it as fits
            if spark >= 4 and series:
                t.append(" " + sparkline(series, spark, cap), style="cyan")
            rows.append((now, t))
    if not rows:
        return [Text("inputs: none (storage and network collectors off or nothing found)", style="dim")]
    # the busiest first: on a short screen the idle loop devices are what goes
    rows.sort(key=lambda r: -r[0])
    return [Text("inputs  (last minute →)", style="bold"), *(t for _, t in rows)]


def _rtt(rtt: float | None, base: float | None) -> Text:
    if rtt is None:
        return Text("")
    t = Text(f"  rtt {rtt * 1000:.1f} ms")
    if base:
        t.append(f" (base {base * 1000:.1f} ms)", style="dim")
        if rtt > 3 * base:
            t.stylize("bold red", 0, len(t))
    return t


def _short(name: str, n: int) -> str:
    return name if len(name) <= n else "…" + name[-(n - 1) :]


def trainer(st: dict[str, Any], view: View) -> list[Text]:
    summarized = st.get("snapshot") or {}
    procs = summarized.get("training_processes") or []
    ck = section(st, "checkpoint")
    out = [Text("trainer", style="bold")]
    jobs = summarized.get("jobs") or []
    job_of = {pid: j for j in jobs for pid in j.get("pids") or []}
    lose = (section(st, "goodput").get("would_lose_gpu_seconds_by_job") or {}) if jobs else {}
    for j in jobs:
        t = Text(f"  {describe_job(j)}", style="bold")
        if j.get("step"):
            t.append(f" step {j['step']}", style="dim")
        if lose.get(j["job_id"]):
            t.append(f"  a reclaim now loses {lose[j['job_id']] / 3600:.1f} GPU-h", style="yellow")
        out.append(t)
    for p in procs:
        cores, allowed = p.get("cpu_cores"), p.get("allowed_cores")
        job = f" job {job_of[p['pid']]['job_id']}" if p["pid"] in job_of else ""
        t = Text(f"  pid {p['pid']} {p.get('comm') or '?'}{job}  {p.get('descendants', 0)} workers  cpu ")
        t.append_text(bar(cores / allowed if cores is not None and allowed else None, 6, "cyan"))
        t.append(f" {_num(cores)}/{_num(allowed)} cores")
        if p.get("read_bytes_per_second"):
            t.append(f"  read {bytes_rate(p['read_bytes_per_second'])}", style="dim")
        out.append(t)
    handlers = {t["pid"]: t.get("handler") for t in ck.get("targets") or []}
    if not procs and not handlers:
        problems = "; ".join(ck.get("problems") or [])
        out.append(Text(f"  no training process found{f' ({problems})' if problems else ''}", style="dim"))
    if ck:
        t = Text(f"  checkpoint {ck.get('signal', '?')}")
        if ck.get("dry_run"):
            t.append(" DRY RUN", style="bold yellow")
        for pid, h in handlers.items():
            ok = h in SIGNAL_READY
            t.append(f"  pid {pid} ")
            shown = "handler ready" if h == HandlerState.HANDLER else str(h)
            t.append(shown, style="green" if ok else "bold red")
        if view.request_file is not None:
            t.append("  request file " + ("present" if view.request_file else "none"))
        # under a notice the handshake is what matters: it comes before the process rows
        out.insert(1 if ck.get("active") or section(st, "preemption").get("active") else len(out), t)
        recent = ck.get("recent") or []
        if recent:
            r = recent[-1]
            out.append(Text(f"  last ack: {r['kind']}{' drill' if r.get('drill') else ''} {r.get('line')}"))
    return out


def preemption(st: dict[str, Any], view: View) -> list[Text]:
    pre = section(st, "preemption") or None
    ck = section(st, "checkpoint")
    if pre is None:
        return [Text("preemption: off", style="dim")]
    if not pre.get("enabled"):
        head = Text(f"preemption off (provider none, {pre.get('selected_by', '?')})", style="dim")
    else:
        head = Text.assemble(("preemption ", "bold"), f"{pre.get('provider')}")
        failing = [s for s in (pre.get("sources") or {}).values() if s.get("errors")]
        head.append(
            "  metadata FAILING" if failing else "  metadata ok", style="bold red" if failing else "green"
        )
    out = [head]
    episodes = {e["event_id"]: e for e in ck.get("active") or []}
    finished = {e["event_id"]: e for e in ck.get("recent") or [] if "event_id" in e}
    for n in pre.get("active") or []:
        t = Text.assemble(("  NOTICE ", "bold red"), f"{n['kind']} ")
        t.append_text(_deadline(n.get("deadline"), view.now, "bold white on red"))
        t.append(f"  {n.get('event_id')}", style="dim")
        out.append(t)
        # its checkpoint episode, running or (once acknowledged) finished
        ep = episodes.pop(n.get("event_id"), None) or finished.get(n.get("event_id"))
        if ep:
            out.append(_episode(ep))
    for ep in episodes.values():  # drills (and notices the watcher no longer lists)
        drill = ep.get("drill")
        t = Text("  ")
        t.append(" DRILL " if drill else "NOTICE", style="bold black on magenta" if drill else "bold red")
        t.append(f" {ep['kind']} ")
        if drill:
            t.append_text(_deadline(ep.get("deadline"), view.now, "bold magenta", "a drill: no real notice"))
        else:
            t.append_text(_deadline(ep.get("deadline"), view.now, "bold white on red"))
            t.append(f"  {ep.get('event_id')}", style="dim")
        out.append(t)
        out.append(_episode(ep))
    if len(out) == 1 and pre.get("enabled"):
        out.append(Text("  no notice", style="green"))
    return out


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _deadline(iso: str | None, now: float, style: str, note: str = "") -> Text:
    """The countdown first (the one thing that must show on 80 columns), then ``note``, then the
    deadline's local clock time."""
    t = Text()
    try:
        when = datetime.fromisoformat(iso) if iso else None
    except ValueError:
        return Text(f"deadline {iso}")
    if when is None:
        t.append(" deadline unknown: act now ", style=style)
    else:
        left = when.timestamp() - now
        t.append(
            f" {countdown(left)} left " if left >= 0 else f" passed {countdown(-left)} ago ", style=style
        )
    if note:
        t.append(f"  {note}", style="bold")
    if when is not None:
        t.append(f"  deadline {when.astimezone().strftime('%H:%M:%S')}", style="dim")
    return t


def _episode(ep: dict[str, Any]) -> Text:
    t = Text(f"    checkpoint {ep.get('phase')}: {ep.get('line')}")
    if ep.get("targets"):
        t.append("  " + "; ".join(ep["targets"]), style="dim")
    return t


def goodput(g: Any) -> list[Text]:
    """The ledger's share of GPU time per bucket (agent.ledger); its own lines add money, the top
    remedy, the checkpoint cadence and what a reclaim would lose."""
    if not isinstance(g, dict):
        return []
    if "error" in g:
        return [Text(f"goodput: {g['error']}", style="red")]
    ratio = g.get("ratio")
    head = Text.assemble(("goodput ", "bold"), (pct(ratio).strip(), "bold"), " ")
    head.append_text(bar(ratio, 10, "green"))
    if g.get("window_seconds") is not None:
        head.append(f"  over {ago(g['window_seconds'])}", style="dim")
    if g.get("gpu_seconds"):  # the buckets are GPU-seconds: 8 GPUs book 8 of them each second
        head.append(f" ({g['gpu_seconds'] / 3600:.2f} GPU-h)", style="dim")
    if g.get("since"):
        head.append(f" since {g['since']}", style="dim")
    out = [head]
    buckets = {k: v for k, v in (g.get("buckets") or {}).items() if isinstance(v, int | float) and v > 0}
    total = sum(buckets.values())
    if total:
        shares = sorted(buckets.items(), key=lambda kv: -kv[1])
        out.append(Text("  " + "  ".join(f"{k} {v / total:.0%}" for k, v in shares)))
    # its first lines say the ratio and the shares again: the rest is what the numbers above lack
    out += [
        Text(f"  {line}", style="dim")
        for line in g.get("lines") or []
        if not line.startswith(("goodput", "  "))
    ]
    return out


def advice(a: Any) -> list[Text]:
    """Which instance to rent next time (agent.advice): its one status line."""
    if not isinstance(a, dict):
        return []
    if "error" in a:
        return [Text(f"advice: {a['error']}", style="red")]
    return [Text(line, style="dim") for line in (a.get("lines") or [])[:1]]
