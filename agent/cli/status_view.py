"""Readable rendering of the status JSON for ``training-node-agent status``.

Sections that later parts add (``classifier``, ``preemption``, ``checkpoint``, ``alerts``) are shown
through their own ``lines`` key when present, so this module stays ignorant of their shapes.
"""

from __future__ import annotations

from typing import Any


def _bytes(v: float | None) -> str:
    if v is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(v) < 1000:
            return f"{v:.1f} {unit}"
        v /= 1000
    return f"{v:.1f} PB"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def render_status(st: dict[str, Any]) -> str:
    out: list[str] = []
    health = "healthy" if st.get("healthy") else f"STALLED ({st.get('health_reason')})"
    out.append(f"training-node-agent {st.get('version')}  up {st.get('uptime_seconds')}s  {health}")
    snap = st.get("snapshot", {})
    for section in ("classifier", "preemption", "checkpoint", "alerts"):
        sec = st.get(section)
        if isinstance(sec, dict) and sec.get("lines"):
            out.append(f"\n[{section}]")
            out.extend(f"  {line}" for line in sec["lines"])
    host = snap.get("host")
    if host:
        out.append("\n[host]")
        out.append(
            f"  cpus {host['cpus']}  busy {_pct(host.get('cpu_busy_ratio'))}  "
            f"iowait {_pct(host.get('cpu_iowait_ratio'))}  steal {_pct(host.get('cpu_steal_ratio'))}  "
            f"load1 {host.get('load1')}"
        )
    gpus = snap.get("gpus")
    if gpus:
        out.append(f"\n[gpus] driver {snap.get('driver_version')}")
        for g in gpus:
            state = "up" if g["up"] else "LOST"
            power = g.get("power_watts")
            limit = g.get("power_limit_watts")
            out.append(
                f"  {g['index']} {g['model']:<24} {state:<4} util {_pct(g.get('utilization_ratio'))}"
                f"  sm {_pct(g.get('sm_active_ratio'))}"
                f"  power {power if power is not None else '-'}/{limit if limit is not None else '-'} W"
                f"  procs {len(g.get('processes', []))}"
            )
    elif "collectors" in snap and "gpu" in snap["collectors"]:
        out.append(f"\n[gpus] none visible: {snap['collectors']['gpu'].get('error')}")
    for key, title in (("disks", "disks"), ("nfs", "nfs"), ("nics", "nics"), ("rdma", "rdma")):
        items = snap.get(key) or {}
        if items:
            out.append(f"\n[{title}]")
            for name, v in items.items():
                rx = v.get("read_bytes_per_second", v.get("rx_bytes_per_second"))
                tx = v.get("tx_bytes_per_second")
                line = f"  {name:<24} {'read' if tx is None else 'rx'} {_bytes(rx)}/s"
                if tx is not None:
                    line += f"  tx {_bytes(tx)}/s"
                out.append(line)
    cols = snap.get("collectors", {})
    if cols:
        out.append("\n[collectors]")
        for name, c in cols.items():
            state = "ok" if c["success"] else ("absent" if c.get("absent") else "FAIL")
            err = f"  {c['error']}" if c.get("error") else ""
            out.append(f"  {name:<10} {state:<6} {c['duration_seconds'] * 1000:.1f} ms{err}")
    return "\n".join(out)
