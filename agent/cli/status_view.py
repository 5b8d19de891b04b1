"""Readable rendering of the status JSON for ``training-node-agent status``.

Sections that later parts add (``classifier``, ``steps``, ``fleet``, ``goodput``, ``advice``, ``preemption``,
``checkpoint``, ``alerts``) are shown through their own ``lines`` key when present, and each source
through its own ``status_lines``, so this module stays ignorant of their shapes.
"""

from __future__ import annotations

from typing import Any

from agent.sources import registry


def render_status(st: dict[str, Any]) -> str:
    out: list[str] = []
    health = "healthy" if st.get("healthy") else f"STALLED ({st.get('health_reason')})"
    out.append(f"training-node-agent {st.get('version')}  up {st.get('uptime_seconds')}s  {health}")
    snap = st.get("snapshot", {})
    sections = ("classifier", "steps", "fleet", "goodput", "advice", "preemption", "checkpoint", "alerts")
    for section in sections:
        sec = st.get(section)
        if isinstance(sec, dict) and sec.get("lines"):
            out.append(f"\n[{section}]")
            out.extend(f"  {line}" for line in sec["lines"])
    for source in registry.sources():
        if source.status_lines is not None:
            out.extend(source.status_lines(snap))
    cols = snap.get("collectors", {})
    if cols:
        out.append("\n[collectors]")
        for name, c in cols.items():
            state = "ok" if c["success"] else ("absent" if c.get("absent") else "FAIL")
            err = f"  {c['error']}" if c.get("error") else ""
            out.append(f"  {name:<10} {state:<6} {c['duration_seconds'] * 1000:.1f} ms{err}")
    return "\n".join(out)
