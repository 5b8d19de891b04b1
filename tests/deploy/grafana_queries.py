"""The queries of configs/grafana/dashboard.json: panel targets, annotations, template variables."""

from __future__ import annotations

import json
from collections.abc import Iterator

from conftest import REPO

DASHBOARD = REPO / "configs" / "grafana" / "dashboard.json"


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def all_panels(d: dict) -> Iterator[dict]:
    for p in d["panels"]:
        yield p
        yield from p.get("panels", [])  # a collapsed row keeps its panels inside


def queries(d: dict) -> list[tuple[str, str]]:
    """(where, expression) for every panel target, annotation and template variable."""
    out = []
    for p in all_panels(d):
        for t in p.get("targets", []):
            out.append((f"panel {p['title']!r} {t['refId']}", t["expr"]))
    for a in d["annotations"]["list"]:
        if "expr" in a:
            out.append((f"annotation {a['name']!r}", a["expr"]))
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            out.append((f"variable ${v['name']}", q))
    return out
